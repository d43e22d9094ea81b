
/*
 * weir: nginx module, the types and functions its files share.
 *
 * ngx_http_weir_module.c      module, directives, configuration, handler,
 *                             the per-request state, delays
 * ngx_http_weir_zone.c        shared memory: the engines' zones and
 *                             counters, cluster syncers
 * ngx_http_weir_policy.c      policy mode (weir_policy, weir on), charges
 * ngx_http_weir_limit.c       weir_req / weir_conn at request time
 * ngx_http_weir_limit_conf.c  weir_req_zone, weir_conn_zone, weir_req,
 *                             weir_conn
 * ngx_http_weir_status.c      weir_status
 * ngx_http_weir_keys.c        weir_status key operations (inspect, reset,
 *                             unban one key)
 * ngx_http_weir_log.c         the variables; $weir_limit, $weir_key,
 *                             $weir_action
 * ngx_http_weir_renew.c       the timer renewing the worker's permits
 * ngx_http_weir_release.c     when permits go back, with the backend's time;
 *                             waking this worker's queued requests
 * ngx_http_weir_test.c        test hooks (built with -DWEIR_TEST_HOOKS=1)
 */


#ifndef _NGX_HTTP_WEIR_MODULE_H_INCLUDED_
#define _NGX_HTTP_WEIR_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <weir.h>


#define NGX_HTTP_WEIR_HEADER_BUF        1024

/* a zone declared by weir_req_zone or weir_conn_zone */

typedef struct {
    ngx_str_t                    name;
    ngx_http_complex_value_t     key;
    size_t                       max_key;    /* longer keys are not limited */
    ngx_str_t                    file;
    ngx_uint_t                   line;
} ngx_http_weir_dzone_t;


/* one weir_req or weir_conn directive */

typedef struct {
    weir_directive_limit         spec;
    ngx_str_t                    file;
    ngx_uint_t                   line;
} ngx_http_weir_limit_t;


/* the engine limits a location selects */

typedef struct {
    uint16_t                    *index;
    ngx_uint_t                   n;
} ngx_http_weir_sel_t;


/* a policy zone placed in shared memory */

typedef struct ngx_http_weir_pzone_s  ngx_http_weir_pzone_t;

struct ngx_http_weir_pzone_s {
    size_t                       bytes;
    void                        *region;
    ngx_str_t                    layout;     /* for the reload notice */

    /* a directive zone: its key, compared on reload */
    ngx_str_t                    key;
    ngx_str_t                    name;

    /* the counters zone: its init attaches this engine */
    void                        *eng;

    /* the counters zone of the running configuration when the limits changed */
    ngx_http_weir_pzone_t       *prev;

    /* a cluster zone's shared remote counts, sync health and stats */
    ngx_http_weir_pzone_t       *cluster;
};


/* an engine over zones in nginx's shared memory */

typedef struct {
    weir_policy                 *policy;
    weir_engine                 *engine;
    ngx_array_t                  pzones;     /* ngx_http_weir_pzone_t * */
    ngx_str_t                    what;       /* in errors: "what: msg" */
    ngx_str_t                    where;      /* " in nginx.conf:LINE" */

    /* this worker's requests queued by the engine, oldest first */
    ngx_queue_t                  waiters;    /* ngx_http_weir_state_t */
} ngx_http_weir_eng_t;


typedef struct {
    ngx_http_weir_eng_t          pol;        /* weir_policy */
    ngx_str_t                    policy_file;

    ngx_http_weir_eng_t          dir;        /* the directives' zones */
    weir_host_limits            *host;
    ngx_array_t                  dzones;     /* ngx_http_weir_dzone_t */
    ngx_flag_t                   selected;   /* a location uses a limit */
    ngx_http_weir_dzone_t      **vars;       /* by the engine's var index */

#if (WEIR_TEST_HOOKS)
    ngx_http_complex_value_t    *test_now;
    ngx_http_complex_value_t    *test_peer;
#endif
} ngx_http_weir_main_conf_t;


typedef struct {
    ngx_array_t                 *req_limits;   /* ngx_http_weir_limit_t * */
    ngx_http_weir_sel_t          req_sel;
    ngx_uint_t                   req_log_level;
    ngx_uint_t                   req_delay_log_level;
    ngx_uint_t                   req_status_code;
    ngx_flag_t                   req_dry_run;

    ngx_array_t                 *conn_limits;  /* ngx_http_weir_limit_t * */
    ngx_http_weir_sel_t          conn_sel;
    ngx_uint_t                   conn_log_level;
    ngx_uint_t                   conn_status_code;
    ngx_flag_t                   conn_dry_run;

    ngx_flag_t                   enable;
    ngx_flag_t                   headers;
    ngx_flag_t                   status;       /* weir_status */
    ngx_flag_t                   status_write; /* weir_status write=on */
} ngx_http_weir_loc_conf_t;


/*
 * Per main request; lives in a cleanup of the main request's pool, so it
 * survives internal redirects (which zero the module contexts).
 */

typedef struct {
    ngx_str_t                    req_status;   /* $weir_req_status */
    ngx_str_t                    conn_status;  /* $weir_conn_status */
    weir_engine                 *conn_engine;  /* holds conn_verdict's */
    uint64_t                     conn_admitted; /* ns, weir_conn passed */
    ngx_uint_t                   conn_learned; /* permits of "auto" zones */

    ngx_http_request_t          *request;
    weir_engine                 *engine;
    unsigned                     policy_done:1;
    unsigned                     evaluated:1;
    unsigned                     bad_target:1;
    unsigned                     test_clock:1;
    uint64_t                     test_now;
    unsigned                     queued:1;
    unsigned                     waiting:1;    /* in the engine's waiters */
    unsigned                     woken:1;      /* by a release, not asked yet */
    ngx_queue_t                  waiter;
    int32_t                      queue_limit;  /* the queue it waits in */
    uint64_t                     queue_key;    /* weir_ticket_queue_key */
    unsigned                     ended:1;      /* the response ended */
    uint64_t                     admitted;     /* ns, the verdict passed */
    uint64_t                     done;         /* ns, when it ended */

    /* the decision $weir_limit, $weir_key and $weir_action show */
    weir_engine                 *log_engine;   /* NULL: none recorded */
    int32_t                      log_limit;
    unsigned                     log_policy:1;
    ngx_str_t                    log_name;
    ngx_str_t                    log_action;
    ngx_str_t                    log_key;      /* a zone's, as it decided */

    /*
     * last, and not zeroed when the state is made (they are most of its
     * size): each is written whole by the engine before it is read, as
     * conn_engine and evaluated tell
     */
    weir_verdict                 conn_verdict; /* permits */
    weir_verdict                 verdict;
} ngx_http_weir_state_t;


/* ngx_http_weir_module.c */

ngx_http_weir_state_t *ngx_http_weir_state(ngx_http_request_t *r,
    ngx_uint_t create);
uint64_t ngx_http_weir_now(ngx_http_request_t *r);
ngx_int_t ngx_http_weir_wait(ngx_http_request_t *r, ngx_msec_t delay,
    ngx_http_event_handler_pt handler);
ngx_int_t ngx_http_weir_waiting(ngx_http_request_t *r);
void ngx_http_weir_resume(ngx_http_request_t *r);
void ngx_http_weir_delay_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_weir_act(ngx_http_request_t *r, weir_outcome *o,
    ngx_uint_t reject_level, ngx_uint_t delay_level);

/* ngx_http_weir_zone.c */

ngx_int_t ngx_http_weir_add_zones(ngx_conf_t *cf, ngx_http_weir_eng_t *eng,
    char *prefix);
ngx_int_t ngx_http_weir_init_process(ngx_cycle_t *cycle);
void ngx_http_weir_exit_process(ngx_cycle_t *cycle);

/* ngx_http_weir_policy.c */

ngx_int_t ngx_http_weir_policy(ngx_http_request_t *r,
    ngx_http_weir_loc_conf_t *wlcf, ngx_http_weir_state_t *st);
char *ngx_http_weir_policy_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_weir_request(ngx_http_request_t *r, weir_request *wr);

/* ngx_http_weir_limit.c */

ngx_int_t ngx_http_weir_limit(ngx_http_request_t *r,
    ngx_http_weir_loc_conf_t *wlcf, ngx_http_weir_state_t *st,
    ngx_uint_t conn);
ngx_int_t ngx_http_weir_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
void ngx_http_weir_limit_request(ngx_http_request_t *r, weir_request *wr);

/* ngx_http_weir_limit_conf.c */

char *ngx_http_weir_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_weir_limit_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_weir_select(ngx_conf_t *cf, ngx_array_t *limits,
    ngx_flag_t dry_run, ngx_uint_t status, ngx_http_weir_sel_t *sel);
ngx_int_t ngx_http_weir_init_limits(ngx_conf_t *cf,
    ngx_http_weir_main_conf_t *wmcf);

/* ngx_http_weir_status.c */

char *ngx_http_weir_status_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_weir_status_merge(ngx_conf_t *cf,
    ngx_http_weir_loc_conf_t *prev, ngx_http_weir_loc_conf_t *conf);
ngx_int_t ngx_http_weir_status_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_buf_t *b, ngx_str_t *type);

extern ngx_str_t  ngx_http_weir_json_type;

/* ngx_http_weir_keys.c */

ngx_int_t ngx_http_weir_is_key_request(ngx_http_request_t *r);
ngx_int_t ngx_http_weir_keys_handler(ngx_http_request_t *r);

/* ngx_http_weir_log.c */

ngx_int_t ngx_http_weir_log_record(ngx_http_weir_state_t *st, weir_engine *e,
    weir_log_decision *d, int style);
ngx_int_t ngx_http_weir_add_variables(ngx_conf_t *cf);

/* ngx_http_weir_renew.c */

void ngx_http_weir_renew_init(ngx_cycle_t *cycle);

/* ngx_http_weir_release.c */

void ngx_http_weir_release(ngx_http_weir_state_t *st, ngx_uint_t end);
void ngx_http_weir_queue_wait(ngx_http_request_t *r,
    ngx_http_weir_state_t *st, ngx_uint_t wait, uint64_t now);
ngx_int_t ngx_http_weir_release_init(ngx_conf_t *cf);

#if (WEIR_TEST_HOOKS)

/* ngx_http_weir_test.c */

ngx_int_t ngx_http_weir_test_now(ngx_http_request_t *r, uint64_t *now);
ngx_uint_t ngx_http_weir_test_frozen(ngx_http_request_t *r);
void ngx_http_weir_test_peer(ngx_http_request_t *r, weir_request *wr);
ngx_int_t ngx_http_weir_test_verdict_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
char *ngx_http_weir_test_clock(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

#endif


extern ngx_module_t  ngx_http_weir_module;


#endif /* _NGX_HTTP_WEIR_MODULE_H_INCLUDED_ */

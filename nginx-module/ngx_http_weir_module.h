
/*
 * weir: nginx module, the types and functions its files share.
 *
 * ngx_http_weir_module.c      module, directives, configuration, handler,
 *                             the per-request state, delays
 * ngx_http_weir_zone.c        shared memory, policy zones, cluster syncers
 * ngx_http_weir_policy.c      policy mode (weir_policy, weir on)
 * ngx_http_weir_limit.c       weir_req / weir_conn at request time
 * ngx_http_weir_limit_conf.c  weir_req_zone, weir_conn_zone, weir_req,
 *                             weir_conn
 * ngx_http_weir_status.c      weir_status
 * ngx_http_weir_test.c        test hooks (built with -DWEIR_TEST_HOOKS=1)
 */


#ifndef _NGX_HTTP_WEIR_MODULE_H_INCLUDED_
#define _NGX_HTTP_WEIR_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <weir.h>


#define NGX_HTTP_WEIR_PASSED            1
#define NGX_HTTP_WEIR_DELAYED           2
#define NGX_HTTP_WEIR_REJECTED          3
#define NGX_HTTP_WEIR_DELAYED_DRY_RUN   4
#define NGX_HTTP_WEIR_REJECTED_DRY_RUN  5

#define NGX_HTTP_WEIR_CONN_PASSED            1
#define NGX_HTTP_WEIR_CONN_REJECTED          2
#define NGX_HTTP_WEIR_CONN_REJECTED_DRY_RUN  3

#define NGX_HTTP_WEIR_GCRA              1
#define NGX_HTTP_WEIR_SLIDING           2
#define NGX_HTTP_WEIR_CONCURRENCY       3

#define NGX_HTTP_WEIR_NS                1000000000ULL
#define NGX_HTTP_WEIR_HEADER_BUF        1024

/* nanoseconds to milliseconds, rounded up */
#define ngx_http_weir_msec(ns)  ((ngx_msec_t) (((ns) + 999999) / 1000000))


/* a zone declared by weir_req_zone or weir_conn_zone */

typedef struct {
    ngx_http_complex_value_t     key;
    ngx_uint_t                   kind;
    uint64_t                     count;
    uint64_t                     period_ns;
    uint64_t                     lease_ns;
    uint64_t                     schema;
    ngx_shm_zone_t              *shm_zone;
    weir_zone                   *zone;
} ngx_http_weir_zone_ctx_t;


/* one weir_req or weir_conn directive */

typedef struct {
    ngx_shm_zone_t              *shm_zone;
    ngx_int_t                    burst;
    ngx_int_t                    delay;      /* 0 default, -1 nodelay, N */
    ngx_uint_t                   conn;
    ngx_uint_t                   line;
    ngx_str_t                    file;
    weir_limiter                *limiter;
} ngx_http_weir_limit_t;


/* a policy zone placed in shared memory */

typedef struct ngx_http_weir_pzone_s  ngx_http_weir_pzone_t;

struct ngx_http_weir_pzone_s {
    size_t                       bytes;
    void                        *region;
    ngx_str_t                    layout;     /* for the reload notice */

    /* the counters zone: its init attaches the engine of this conf */
    void                        *conf;

    /* a cluster zone's shared remote counts, sync health and stats */
    ngx_http_weir_pzone_t       *cluster;
};


typedef struct {
    ngx_array_t                  limits;     /* ngx_http_weir_limit_t * */
    ngx_array_t                  zones;      /* ngx_http_weir_zone_ctx_t * */

    ngx_str_t                    policy_file;
    ngx_str_t                    policy_conf;  /* "nginx.conf:LINE" */
    weir_policy                 *policy;
    weir_engine                 *engine;
    ngx_array_t                  pzones;     /* ngx_http_weir_pzone_t * */

#if (WEIR_TEST_HOOKS)
    ngx_http_complex_value_t    *test_now;
    ngx_http_complex_value_t    *test_peer;
#endif
} ngx_http_weir_main_conf_t;


typedef struct {
    ngx_array_t                 *req_limits;   /* ngx_http_weir_limit_t * */
    ngx_uint_t                   req_log_level;
    ngx_uint_t                   req_delay_log_level;
    ngx_uint_t                   req_status_code;
    ngx_flag_t                   req_dry_run;

    ngx_array_t                 *conn_limits;  /* ngx_http_weir_limit_t * */
    ngx_uint_t                   conn_log_level;
    ngx_uint_t                   conn_status_code;
    ngx_flag_t                   conn_dry_run;

    ngx_flag_t                   enable;
    ngx_flag_t                   headers;
    ngx_msec_t                   queue_timeout;
    ngx_msec_t                   queue_poll;
} ngx_http_weir_loc_conf_t;


/*
 * Per main request; lives in a cleanup of the main request's pool, so it
 * survives internal redirects (which zero the module contexts).
 */

typedef struct {
    ngx_uint_t                   req_status;
    ngx_uint_t                   conn_status;
    ngx_array_t                 *held;         /* weir_conn permits */

    ngx_http_request_t          *request;
    weir_engine                 *engine;
    weir_verdict                 verdict;
    ngx_msec_t                   queue_deadline;
    unsigned                     policy_done:1;
    unsigned                     evaluated:1;
    unsigned                     bad_target:1;
    unsigned                     test_clock:1;
    uint64_t                     test_now;
    unsigned                     queued:1;
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

/* ngx_http_weir_zone.c */

void *ngx_http_weir_shm_region(ngx_shm_zone_t *shm_zone, ngx_uint_t reuse,
    size_t *len);
ngx_shm_zone_t *ngx_http_weir_old_zone(ngx_conf_t *cf, ngx_str_t *name,
    size_t prefix);
ngx_shm_zone_t *ngx_http_weir_add_pzone(ngx_conf_t *cf,
    ngx_http_weir_pzone_t *pz, char *prefix, u_char *name, size_t len,
    uint64_t id, size_t spare, ngx_http_weir_pzone_t **prev);
ngx_int_t ngx_http_weir_init_counters_zone(ngx_shm_zone_t *shm_zone,
    void *data);
ngx_int_t ngx_http_weir_init_process(ngx_cycle_t *cycle);
void ngx_http_weir_exit_process(ngx_cycle_t *cycle);

/* ngx_http_weir_policy.c */

ngx_int_t ngx_http_weir_policy(ngx_http_request_t *r,
    ngx_http_weir_loc_conf_t *wlcf, ngx_http_weir_state_t *st);
char *ngx_http_weir_policy_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* ngx_http_weir_limit.c */

ngx_int_t ngx_http_weir_req(ngx_http_request_t *r,
    ngx_http_weir_loc_conf_t *wlcf, ngx_http_weir_state_t *st);
ngx_int_t ngx_http_weir_conn(ngx_http_request_t *r,
    ngx_http_weir_loc_conf_t *wlcf, ngx_http_weir_state_t *st);
void ngx_http_weir_release_held(ngx_http_weir_state_t *st, uint64_t now);
ngx_int_t ngx_http_weir_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);

/* ngx_http_weir_limit_conf.c */

char *ngx_http_weir_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_weir_req_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_weir_conn_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_weir_init_limits(ngx_conf_t *cf,
    ngx_http_weir_main_conf_t *wmcf);

/* ngx_http_weir_status.c */

char *ngx_http_weir_status_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

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


/*
 * weir: nginx module.
 *
 * Directives shaped like limit_req / limit_conn (weir_req_zone, weir_req,
 * weir_conn_zone, weir_conn, ...) and a policy mode (weir_policy, weir).
 * Every limiting decision is made by libweir through its C ABI; this file
 * only moves requests, keys, timers and shared memory between nginx and weir.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <pthread.h>

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
    ngx_shm_zone_t              *shm_zone;
    size_t                       bytes;
    uint64_t                     schema;
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
    ngx_http_weir_pzone_t       *counters;   /* shared by all workers */

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


typedef struct {
    ngx_http_weir_limit_t       *limit;
    ngx_http_weir_zone_ctx_t    *ctx;
    weir_permit                  permit;
} ngx_http_weir_held_t;


/*
 * Per main request; lives in a cleanup of the main request's pool, so it
 * survives internal redirects (which zero the module contexts).
 */

typedef struct {
    ngx_uint_t                   req_status;
    ngx_uint_t                   conn_status;
    ngx_array_t                 *held;         /* ngx_http_weir_held_t */

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


typedef struct {
    ngx_str_t                    key;
    ngx_http_weir_limit_t       *limit;
} ngx_http_weir_charge_t;


static ngx_int_t ngx_http_weir_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_weir_req(ngx_http_request_t *r,
    ngx_http_weir_loc_conf_t *wlcf, ngx_http_weir_state_t *st);
static ngx_int_t ngx_http_weir_conn(ngx_http_request_t *r,
    ngx_http_weir_loc_conf_t *wlcf, ngx_http_weir_state_t *st);
static ngx_int_t ngx_http_weir_policy(ngx_http_request_t *r,
    ngx_http_weir_loc_conf_t *wlcf, ngx_http_weir_state_t *st);
static void ngx_http_weir_delay_handler(ngx_http_request_t *r);
static void ngx_http_weir_queue_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_weir_wait(ngx_http_request_t *r,
    ngx_msec_t delay, ngx_http_event_handler_pt handler);
static void ngx_http_weir_cleanup(void *data);
static ngx_http_weir_state_t *ngx_http_weir_state(ngx_http_request_t *r,
    ngx_uint_t create);
static uint64_t ngx_http_weir_now(ngx_http_request_t *r);

static void ngx_http_weir_resume(ngx_http_request_t *r);
static ngx_uint_t ngx_http_weir_policy_log_level(ngx_http_weir_state_t *st,
    weir_verdict *v, ngx_uint_t delay);
static ngx_msec_t ngx_http_weir_queue_timeout(ngx_http_weir_state_t *st,
    weir_verdict *v, ngx_http_weir_loc_conf_t *wlcf);
static ngx_int_t ngx_http_weir_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_weir_init_policy_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_weir_init_counters_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static void *ngx_http_weir_shm_region(ngx_shm_zone_t *shm_zone,
    ngx_uint_t reuse, size_t *len);
static ngx_shm_zone_t *ngx_http_weir_add_pzone(ngx_conf_t *cf,
    ngx_http_weir_pzone_t *pz, char *prefix, u_char *name, size_t len,
    uint64_t id, size_t size, ngx_http_weir_pzone_t **prev);
static ngx_shm_zone_t *ngx_http_weir_old_zone(ngx_conf_t *cf, ngx_str_t *name,
    size_t prefix);

static ngx_int_t ngx_http_weir_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
#if (WEIR_TEST_HOOKS)
static ngx_int_t ngx_http_weir_test_verdict_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
#endif

static void *ngx_http_weir_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_weir_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_weir_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_weir_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_weir_req_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_weir_conn_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_weir_policy_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_weir_status_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
#if (WEIR_TEST_HOOKS)
static char *ngx_http_weir_test_clock(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
#endif
static void ngx_http_weir_free_conf(void *data);
static ngx_int_t ngx_http_weir_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_weir_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_weir_init_process(ngx_cycle_t *cycle);
static void ngx_http_weir_exit_process(ngx_cycle_t *cycle);
static void ngx_http_weir_cluster_log(ngx_event_t *ev);


static ngx_conf_enum_t  ngx_http_weir_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};


static ngx_conf_num_bounds_t  ngx_http_weir_status_bounds = {
    ngx_conf_check_num_bounds, 400, 599
};


static ngx_command_t  ngx_http_weir_commands[] = {

    { ngx_string("weir_req_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_weir_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      NGX_HTTP_WEIR_GCRA,
      NULL },

    { ngx_string("weir_req"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE123,
      ngx_http_weir_req_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("weir_req_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, req_log_level),
      &ngx_http_weir_log_levels },

    { ngx_string("weir_req_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, req_status_code),
      &ngx_http_weir_status_bounds },

    { ngx_string("weir_req_dry_run"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, req_dry_run),
      NULL },

    { ngx_string("weir_conn_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE23,
      ngx_http_weir_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      NGX_HTTP_WEIR_CONCURRENCY,
      NULL },

    { ngx_string("weir_conn"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE2,
      ngx_http_weir_conn_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("weir_conn_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, conn_log_level),
      &ngx_http_weir_log_levels },

    { ngx_string("weir_conn_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, conn_status_code),
      &ngx_http_weir_status_bounds },

    { ngx_string("weir_conn_dry_run"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, conn_dry_run),
      NULL },

    { ngx_string("weir_policy"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_weir_policy_directive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("weir"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, enable),
      NULL },

    { ngx_string("weir_headers"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, headers),
      NULL },

    { ngx_string("weir_queue_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, queue_timeout),
      NULL },

    { ngx_string("weir_queue_poll"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, queue_poll),
      NULL },

    { ngx_string("weir_status"),
      NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_weir_status_directive,
      0,
      0,
      NULL },

#if (WEIR_TEST_HOOKS)
    { ngx_string("weir_test_clock"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_weir_test_clock,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },
#endif

      ngx_null_command
};


static ngx_http_module_t  ngx_http_weir_module_ctx = {
    ngx_http_weir_add_variables,           /* preconfiguration */
    ngx_http_weir_init,                    /* postconfiguration */

    ngx_http_weir_create_main_conf,        /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_weir_create_loc_conf,         /* create location configuration */
    ngx_http_weir_merge_loc_conf           /* merge location configuration */
};


ngx_module_t  ngx_http_weir_module = {
    NGX_MODULE_V1,
    &ngx_http_weir_module_ctx,             /* module context */
    ngx_http_weir_commands,                /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_weir_init_process,            /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_weir_exit_process,            /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_variable_t  ngx_http_weir_vars[] = {

    { ngx_string("weir_req_status"), NULL,
      ngx_http_weir_status_variable, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("weir_conn_status"), NULL,
      ngx_http_weir_status_variable, 1, NGX_HTTP_VAR_NOCACHEABLE, 0 },

#if (WEIR_TEST_HOOKS)
    { ngx_string("weir_test_verdict"), NULL,
      ngx_http_weir_test_verdict_variable, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },
#endif

      ngx_http_null_variable
};


static ngx_str_t  ngx_http_weir_req_status_names[] = {
    ngx_string("PASSED"),
    ngx_string("DELAYED"),
    ngx_string("REJECTED"),
    ngx_string("DELAYED_DRY_RUN"),
    ngx_string("REJECTED_DRY_RUN")
};


static ngx_str_t  ngx_http_weir_conn_status_names[] = {
    ngx_string("PASSED"),
    ngx_string("REJECTED"),
    ngx_string("REJECTED_DRY_RUN")
};


static ngx_int_t
ngx_http_weir_handler(ngx_http_request_t *r)
{
    ngx_int_t                   rc;
    ngx_http_weir_state_t      *st;
    ngx_http_weir_loc_conf_t   *wlcf;
    ngx_http_weir_main_conf_t  *wmcf;

    wlcf = ngx_http_get_module_loc_conf(r, ngx_http_weir_module);
    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    if (wlcf->req_limits == NULL && wlcf->conn_limits == NULL
        && (wlcf->enable != 1 || wmcf->engine == NULL))
    {
        return NGX_DECLINED;
    }

    st = ngx_http_weir_state(r, 1);
    if (st == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (wlcf->req_limits && st->req_status == 0) {
        rc = ngx_http_weir_req(r, wlcf, st);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    if (wlcf->conn_limits && st->conn_status == 0) {
        rc = ngx_http_weir_conn(r, wlcf, st);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    if (wlcf->enable == 1 && wmcf->engine && !st->policy_done) {
        return ngx_http_weir_policy(r, wlcf, st);
    }

    return NGX_DECLINED;
}


/* nginx's excess, in milli-requests, from a GCRA verdict */

static uint64_t
ngx_http_weir_excess(ngx_http_weir_zone_ctx_t *ctx, ngx_http_weir_limit_t *lim,
    weir_check *chk)
{
    uint64_t  t, ahead;

    if (ctx->kind != NGX_HTTP_WEIR_GCRA) {
        return (chk->action == WEIR_REJECT) ? 1000 : 0;
    }

    t = ctx->period_ns / ctx->count;

    if (t == 0) {
        return 0;
    }

    if (chk->action == WEIR_REJECT) {
        ahead = (uint64_t) lim->burst * t + chk->retry_after_ns;

    } else {
        ahead = (chk->reset_ns > t) ? chk->reset_ns - t : 0;
    }

    return ahead / t * 1000 + ahead % t * 1000 / t;
}


static ngx_int_t
ngx_http_weir_req(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st)
{
    int                          wrc;
    uint64_t                     now, excess, wait, max_wait, max_excess;
    ngx_str_t                    key;
    ngx_uint_t                   i, n, k;
    ngx_msec_t                   delay;
    weir_check                   chk;
    ngx_http_weir_limit_t      **limits, *lim, *max_lim;
    ngx_http_weir_charge_t      *charged;
    ngx_http_weir_zone_ctx_t    *ctx;

    limits = wlcf->req_limits->elts;
    n = wlcf->req_limits->nelts;

    charged = ngx_palloc(r->pool, n * sizeof(ngx_http_weir_charge_t));
    if (charged == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    now = ngx_http_weir_now(r);
    k = 0;
    max_wait = 0;
    max_excess = 0;
    max_lim = NULL;

    for (i = 0; i < n; i++) {
        lim = limits[i];
        ctx = lim->shm_zone->data;

        if (ngx_http_complex_value(r, &ctx->key, &key) != NGX_OK) {
            goto failed;
        }

        if (key.len == 0) {
            continue;
        }

        if (key.len > 65535) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "the value of the \"%V\" key "
                          "is more than 65535 bytes: \"%V\"",
                          &ctx->key.value, &key);
            continue;
        }

        wrc = weir_zone_check(ctx->zone, lim->limiter, key.data, key.len, 1,
                              now, &chk);

        if (wrc != WEIR_OK) {
            /* fail open, as weir's default failure mode does */
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "weir_zone_check() failed (%d) in zone \"%V\"",
                          wrc, &lim->shm_zone->shm.name);
            continue;
        }

        if (chk.action == WEIR_REJECT) {
            excess = ngx_http_weir_excess(ctx, lim, &chk);

            ngx_log_error(wlcf->req_log_level, r->connection->log, 0,
                          "limiting requests%s, excess: %uL.%03uL "
                          "by zone \"%V\"",
                          wlcf->req_dry_run ? ", dry run" : "",
                          excess / 1000, excess % 1000,
                          &lim->shm_zone->shm.name);

            while (k--) {
                ctx = charged[k].limit->shm_zone->data;
                (void) weir_zone_refund(ctx->zone, charged[k].limit->limiter,
                                        charged[k].key.data,
                                        charged[k].key.len, 1, now);
            }

            if (wlcf->req_dry_run) {
                st->req_status = NGX_HTTP_WEIR_REJECTED_DRY_RUN;
                return NGX_DECLINED;
            }

            st->req_status = NGX_HTTP_WEIR_REJECTED;

            return wlcf->req_status_code;
        }

        charged[k].key = key;
        charged[k].limit = lim;
        k++;

        wait = (chk.action == WEIR_DELAY) ? chk.wait_ns : 0;

        if (wait > max_wait) {
            max_wait = wait;
            max_lim = lim;
            max_excess = ngx_http_weir_excess(ctx, lim, &chk);
        }
    }

    if (k == 0) {
        return NGX_DECLINED;
    }

    if (max_wait == 0) {
        st->req_status = NGX_HTTP_WEIR_PASSED;
        return NGX_DECLINED;
    }

    ngx_log_error(wlcf->req_delay_log_level, r->connection->log, 0,
                  "delaying request%s, excess: %uL.%03uL, by zone \"%V\"",
                  wlcf->req_dry_run ? ", dry run" : "",
                  max_excess / 1000, max_excess % 1000,
                  &max_lim->shm_zone->shm.name);

    if (wlcf->req_dry_run) {
        st->req_status = NGX_HTTP_WEIR_DELAYED_DRY_RUN;
        return NGX_DECLINED;
    }

    st->req_status = NGX_HTTP_WEIR_DELAYED;

    delay = (ngx_msec_t) ((max_wait + 999999) / 1000000);

    return ngx_http_weir_wait(r, delay, ngx_http_weir_delay_handler);

failed:

    while (k--) {
        ctx = charged[k].limit->shm_zone->data;
        (void) weir_zone_refund(ctx->zone, charged[k].limit->limiter,
                                charged[k].key.data, charged[k].key.len, 1,
                                now);
    }

    return NGX_HTTP_INTERNAL_SERVER_ERROR;
}


static void
ngx_http_weir_release_held(ngx_http_weir_state_t *st, uint64_t now)
{
    ngx_uint_t             i;
    ngx_http_weir_held_t  *held;

    if (st->held == NULL) {
        return;
    }

    held = st->held->elts;

    for (i = 0; i < st->held->nelts; i++) {
        (void) weir_zone_release(held[i].ctx->zone, held[i].limit->limiter,
                                 &held[i].permit, now);
    }

    st->held->nelts = 0;
}


static ngx_int_t
ngx_http_weir_conn(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st)
{
    int                          wrc;
    uint64_t                     now;
    ngx_str_t                    key;
    ngx_uint_t                   i, n;
    weir_check                   chk;
    weir_permit                  permit;
    ngx_http_weir_held_t        *h;
    ngx_http_weir_limit_t      **limits, *lim;
    ngx_http_weir_zone_ctx_t    *ctx;

    limits = wlcf->conn_limits->elts;
    n = wlcf->conn_limits->nelts;

    now = ngx_http_weir_now(r);

    for (i = 0; i < n; i++) {
        lim = limits[i];
        ctx = lim->shm_zone->data;

        if (ngx_http_complex_value(r, &ctx->key, &key) != NGX_OK) {
            ngx_http_weir_release_held(st, now);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (key.len == 0) {
            continue;
        }

        if (key.len > 255) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "the value of the \"%V\" key "
                          "is more than 255 bytes: \"%V\"",
                          &ctx->key.value, &key);
            continue;
        }

        st->conn_status = NGX_HTTP_WEIR_CONN_PASSED;

        wrc = weir_zone_acquire(ctx->zone, lim->limiter, key.data, key.len,
                                now, &chk, &permit);

        if (wrc != WEIR_OK) {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "weir_zone_acquire() failed (%d) in zone \"%V\"",
                          wrc, &lim->shm_zone->shm.name);
            continue;
        }

        if (chk.action == WEIR_REJECT) {
            ngx_log_error(wlcf->conn_log_level, r->connection->log, 0,
                          "limiting connections%s by zone \"%V\"",
                          wlcf->conn_dry_run ? ", dry run," : "",
                          &lim->shm_zone->shm.name);

            ngx_http_weir_release_held(st, now);

            if (wlcf->conn_dry_run) {
                st->conn_status = NGX_HTTP_WEIR_CONN_REJECTED_DRY_RUN;
                return NGX_DECLINED;
            }

            st->conn_status = NGX_HTTP_WEIR_CONN_REJECTED;

            return wlcf->conn_status_code;
        }

        if (st->held == NULL) {
            st->held = ngx_array_create(r->main->pool, n,
                                        sizeof(ngx_http_weir_held_t));
            if (st->held == NULL) {
                (void) weir_zone_release(ctx->zone, lim->limiter, &permit,
                                         now);
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
        }

        h = ngx_array_push(st->held);
        if (h == NULL) {
            (void) weir_zone_release(ctx->zone, lim->limiter, &permit, now);
            ngx_http_weir_release_held(st, now);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        h->limit = lim;
        h->ctx = ctx;
        h->permit = permit;
    }

    return NGX_DECLINED;
}


/* policy mode */

/*
 * Where the last header lookup stopped.  The engine reads the lines of one
 * name in order (nth 0, 1, 2, ...) within one evaluation: resuming after the
 * previous line makes a walk over n repeated lines O(n), not O(n^2).  Reset
 * by ngx_http_weir_request() before each evaluation (workers run one at a
 * time), so it never points into another request's headers.
 */

static struct {
    ngx_http_request_t  *r;
    ngx_list_part_t     *part;
    ngx_uint_t           i;
    size_t               nth;
} ngx_http_weir_header_cursor;


static int
ngx_http_weir_header_lookup(void *data, const uint8_t *lname, size_t len,
    size_t nth, const uint8_t **value, size_t *value_len)
{
    ngx_http_request_t  *r = data;

    size_t            seen;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->headers_in.headers.part;
    i = 0;
    seen = 0;

    if (ngx_http_weir_header_cursor.r == r
        && ngx_http_weir_header_cursor.nth + 1 == nth)
    {
        /* resume after the (nth - 1)th line if it has this name */

        h = ngx_http_weir_header_cursor.part->elts;
        h += ngx_http_weir_header_cursor.i;

        if (h->key.len == len && ngx_strncmp(h->lowcase_key, lname, len) == 0)
        {
            part = ngx_http_weir_header_cursor.part;
            i = ngx_http_weir_header_cursor.i + 1;
            seen = nth;
        }
    }

    h = part->elts;

    for ( /* void */ ; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].hash == 0 || h[i].key.len != len
            || ngx_strncmp(h[i].lowcase_key, lname, len) != 0)
        {
            continue;
        }

        if (seen++ == nth) {
            ngx_http_weir_header_cursor.r = r;
            ngx_http_weir_header_cursor.part = part;
            ngx_http_weir_header_cursor.i = i;
            ngx_http_weir_header_cursor.nth = nth;

            *value = h[i].value.data;
            *value_len = h[i].value.len;
            return 1;
        }
    }

    return 0;
}


static void
ngx_http_weir_request(ngx_http_request_t *r, weir_request *wr)
{
    ngx_http_request_t  *m;

    m = r->main;

    ngx_memzero(wr, sizeof(weir_request));

    wr->method = m->method_name.data;
    wr->method_len = m->method_name.len;

    if (m->unparsed_uri.len) {
        wr->target = m->unparsed_uri.data;
        wr->target_len = m->unparsed_uri.len;

    } else {
        wr->target = m->uri.data;
        wr->target_len = m->uri.len;
    }

    wr->peer = m->connection->addr_text.data;
    wr->peer_len = m->connection->addr_text.len;

#if (WEIR_TEST_HOOKS)
    {
    ngx_str_t                   peer;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    if (wmcf->test_peer
        && ngx_http_complex_value(r, wmcf->test_peer, &peer) == NGX_OK
        && peer.len)
    {
        wr->peer = peer.data;
        wr->peer_len = peer.len;
    }
    }
#endif

    ngx_http_weir_header_cursor.r = NULL;

    wr->header = ngx_http_weir_header_lookup;
    wr->header_ctx = m;
}


/* adds weir's "Name: value\r\n" lines to the response headers */

static ngx_int_t
ngx_http_weir_add_headers(ngx_http_request_t *r, u_char *buf, size_t len,
    ngx_flag_t ratelimit)
{
    u_char           *p, *last, *eol, *colon;
    ngx_table_elt_t  *h;

    p = buf;
    last = buf + len;

    while (p < last) {
        eol = ngx_strlchr(p, last, '\r');
        if (eol == NULL) {
            eol = last;
        }

        colon = ngx_strlchr(p, eol, ':');

        if (colon && !(ratelimit == 0
                       && colon - p >= 9
                       && ngx_strncasecmp(p, (u_char *) "ratelimit", 9) == 0))
        {
            h = ngx_list_push(&r->headers_out.headers);
            if (h == NULL) {
                return NGX_ERROR;
            }

            h->hash = 1;
            h->key.data = p;
            h->key.len = colon - p;

            colon++;
            while (colon < eol && *colon == ' ') {
                colon++;
            }

            h->value.data = colon;
            h->value.len = eol - colon;
#if (nginx_version >= 1023000)
            h->next = NULL;
#endif
        }

        p = eol + 2;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_weir_verdict(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st, int wrc, u_char *buf)
{
    ngx_msec_t     delay;
    const uint8_t  *name;
    size_t          name_len;
    ngx_str_t       lname;
    weir_verdict   *v;

    v = &st->verdict;

    if (wrc == WEIR_ERR_BAD_TARGET) {
        st->policy_done = 1;
        st->bad_target = 1;
        return NGX_HTTP_BAD_REQUEST;
    }

    if (wrc != WEIR_OK) {
        st->policy_done = 1;

        /* the policy's failure_mode decides when weir cannot */

        if (weir_engine_fails_closed(st->engine)) {
            ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                          "weir_engine_evaluate() failed (%d), rejecting "
                          "the request (failure_mode \"closed\")", wrc);
            return NGX_HTTP_SERVICE_UNAVAILABLE;
        }

        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "weir_engine_evaluate() failed (%d), letting the "
                      "request through (failure_mode \"open\")", wrc);
        return NGX_DECLINED;
    }

    if (ngx_http_weir_add_headers(r, buf, v->headers_len, wlcf->headers)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_null(&lname);

    if (v->limit >= 0
        && weir_engine_limit_name(st->engine, v->limit, &name, &name_len)
           == WEIR_OK)
    {
        lname.data = (u_char *) name;
        lname.len = name_len;
    }

    if (v->dry_run_limit >= 0
        && weir_engine_limit_name(st->engine, v->dry_run_limit, &name,
                                  &name_len)
           == WEIR_OK)
    {
        ngx_str_t   dname;
        ngx_uint_t  level;

        dname.data = (u_char *) name;
        dname.len = name_len;

        level = (v->dry_run_action == WEIR_REJECT) ? NGX_LOG_ERR
                                                   : NGX_LOG_WARN;

        ngx_log_error(level, r->connection->log, 0,
                      "%s, dry run, by weir limit \"%V\"",
                      v->dry_run_action == WEIR_REJECT
                          ? "limiting requests" : "delaying request",
                      &dname);
    }

    switch (v->action) {

    case WEIR_PASS:
        st->policy_done = 1;
        return NGX_DECLINED;

    case WEIR_DELAY:
        st->policy_done = 1;

        ngx_log_error(ngx_http_weir_policy_log_level(st, v, 1),
                      r->connection->log, 0,
                      "delaying request, %uLms, by weir limit \"%V\"",
                      v->wait_ns / 1000000, &lname);

#if (WEIR_TEST_HOOKS)
        {
        ngx_http_weir_main_conf_t  *wmcf;

        wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

        if (wmcf->test_now) {
            /* injected time does not pass while waiting */
            return NGX_DECLINED;
        }
        }
#endif

        delay = (ngx_msec_t) ((v->wait_ns + 999999) / 1000000);

        return ngx_http_weir_wait(r, delay, ngx_http_weir_delay_handler);

    case WEIR_QUEUE:
        if (!st->queued) {
            st->queued = 1;
            st->queue_deadline = ngx_current_msec
                                 + ngx_http_weir_queue_timeout(st, v, wlcf);

            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "queueing request by weir limit \"%V\"", &lname);
        }

        return ngx_http_weir_wait(r, wlcf->queue_poll,
                                  ngx_http_weir_queue_handler);

    default: /* WEIR_REJECT */
        st->policy_done = 1;

        ngx_log_error(ngx_http_weir_policy_log_level(st, v, 0),
                      r->connection->log, 0,
                      "limiting requests by weir limit \"%V\"", &lname);

        return v->status ? v->status : NGX_HTTP_SERVICE_UNAVAILABLE;
    }
}


/*
 * the log level the deciding policy limit asks for (its log_level); delays
 * one level lower, as limit_req logs them
 */

static ngx_uint_t
ngx_http_weir_policy_log_level(ngx_http_weir_state_t *st, weir_verdict *v,
    ngx_uint_t delay)
{
    int                lvl;
    static ngx_uint_t  levels[] = {
        NGX_LOG_INFO, NGX_LOG_NOTICE, NGX_LOG_WARN, NGX_LOG_ERR
    };

    lvl = (v->limit >= 0)
          ? weir_engine_limit_log_level(st->engine, (size_t) v->limit) : 3;

    if (lvl < 0 || lvl > 3) {
        lvl = 3;
    }

    if (delay && lvl > 0) {
        lvl--;
    }

    return levels[lvl];
}


/*
 * how long a queued request waits: weir_queue_timeout when set, else the
 * deciding limit's timeout from the policy
 */

static ngx_msec_t
ngx_http_weir_queue_timeout(ngx_http_weir_state_t *st, weir_verdict *v,
    ngx_http_weir_loc_conf_t *wlcf)
{
    uint64_t  ns;

    if (wlcf->queue_timeout != NGX_CONF_UNSET_MSEC) {
        return wlcf->queue_timeout;
    }

    if (v->limit >= 0
        && weir_engine_limit_queue_timeout(st->engine, (size_t) v->limit, &ns)
           == WEIR_OK
        && ns > 0)
    {
        return (ngx_msec_t) (ns / 1000000);
    }

    return 5000;
}


static ngx_int_t
ngx_http_weir_policy(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st)
{
    int                          wrc;
    u_char                      *buf;
    weir_request                 wr;
    ngx_http_weir_main_conf_t   *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    buf = ngx_pnalloc(r->pool, NGX_HTTP_WEIR_HEADER_BUF);
    if (buf == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_weir_request(r, &wr);

    st->engine = wmcf->engine;
    st->evaluated = 1;

    wrc = weir_engine_evaluate(st->engine, &wr, ngx_http_weir_now(r),
                               &st->verdict, buf, NGX_HTTP_WEIR_HEADER_BUF);

    return ngx_http_weir_verdict(r, wlcf, st, wrc, buf);
}


static void
ngx_http_weir_queue_handler(ngx_http_request_t *r)
{
    int                          wrc;
    u_char                      *buf;
    ngx_int_t                    rc;
    ngx_event_t                 *wev;
    weir_request                 wr;
    ngx_http_weir_state_t       *st;
    ngx_http_weir_loc_conf_t    *wlcf;

    wev = r->connection->write;

    if (wev->delayed) {
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    st = ngx_http_weir_state(r, 0);
    wlcf = ngx_http_get_module_loc_conf(r, ngx_http_weir_module);

    if (st == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    buf = ngx_pnalloc(r->pool, NGX_HTTP_WEIR_HEADER_BUF);
    if (buf == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_http_weir_request(r, &wr);

    wrc = weir_engine_evaluate_queued(st->engine, &wr, ngx_http_weir_now(r),
                                      &st->verdict, buf,
                                      NGX_HTTP_WEIR_HEADER_BUF);

    if (wrc == WEIR_OK && st->verdict.action == WEIR_QUEUE
        && (ngx_msec_int_t) (ngx_current_msec - st->queue_deadline) >= 0)
    {
        /* the wait timed out: give the place up and reject */

        (void) weir_engine_abandon(st->engine, &st->verdict,
                                   ngx_http_weir_now(r));

        st->policy_done = 1;

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "limiting requests, queue timeout, by weir");

        ngx_http_finalize_request(r, st->verdict.status
                                     ? st->verdict.status
                                     : NGX_HTTP_SERVICE_UNAVAILABLE);
        return;
    }

    rc = ngx_http_weir_verdict(r, wlcf, st, wrc, buf);

    if (rc == NGX_AGAIN) {
        return;
    }

    if (rc != NGX_DECLINED) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    ngx_http_weir_resume(r);
}


/* continues the phases of a request that a delay or a queue held */

static void
ngx_http_weir_resume(ngx_http_request_t *r)
{
    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    ngx_http_core_run_phases(r);
}


/* holds the request for "delay" ms with a timer on the write event */

static ngx_int_t
ngx_http_weir_wait(ngx_http_request_t *r, ngx_msec_t delay,
    ngx_http_event_handler_pt handler)
{
    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);

    } else {
        if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    /* the client closing the connection finalizes the request */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = handler;

    r->connection->write->delayed = 1;
    ngx_add_timer(r->connection->write, delay);

    return NGX_AGAIN;
}


static void
ngx_http_weir_delay_handler(ngx_http_request_t *r)
{
    ngx_event_t  *wev;

    wev = r->connection->write;

    if (wev->delayed) {

        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    ngx_http_weir_resume(r);
}


static void
ngx_http_weir_cleanup(void *data)
{
    ngx_http_weir_state_t  *st = data;

    uint64_t  now;

    if (st->request == NULL) {
        return;
    }

    /* the request is being freed: no variables can be evaluated now */

    now = st->test_clock ? st->test_now : weir_now_ns();

    ngx_http_weir_release_held(st, now);

    if (st->evaluated) {
        if (st->verdict.action == WEIR_QUEUE) {
            (void) weir_engine_abandon(st->engine, &st->verdict, now);
        }

        (void) weir_engine_release(st->engine, &st->verdict, now);
    }
}


static ngx_http_weir_state_t *
ngx_http_weir_state(ngx_http_request_t *r, ngx_uint_t create)
{
    ngx_pool_cleanup_t     *cln;
    ngx_http_weir_state_t  *st;

    st = ngx_http_get_module_ctx(r->main, ngx_http_weir_module);

    if (st) {
        return st;
    }

    for (cln = r->main->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_weir_cleanup) {
            st = cln->data;
            ngx_http_set_ctx(r->main, st, ngx_http_weir_module);
            return st;
        }
    }

    if (!create) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->main->pool, sizeof(ngx_http_weir_state_t));
    if (cln == NULL) {
        return NULL;
    }

    st = cln->data;
    ngx_memzero(st, sizeof(ngx_http_weir_state_t));

    st->request = r->main;

    cln->handler = ngx_http_weir_cleanup;

    ngx_http_set_ctx(r->main, st, ngx_http_weir_module);

    return st;
}


static uint64_t
ngx_http_weir_now(ngx_http_request_t *r)
{
#if (WEIR_TEST_HOOKS)
    u_char                     *p, *last;
    uint64_t                    now;
    ngx_str_t                   s;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    if (wmcf->test_now
        && ngx_http_complex_value(r, wmcf->test_now, &s) == NGX_OK
        && s.len)
    {
        ngx_http_weir_state_t  *st;

        now = 0;
        last = s.data + s.len;

        for (p = s.data; p < last && *p >= '0' && *p <= '9'; p++) {
            now = now * 10 + (*p - '0');
        }

        st = ngx_http_weir_state(r, 0);

        if (st) {
            st->test_clock = 1;
            st->test_now = now;
        }

        return now;
    }
#endif

    return weir_now_ns();
}


/* $weir_req_status (data 0) and $weir_conn_status (data 1) */

static ngx_int_t
ngx_http_weir_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t              *name;
    ngx_uint_t              status;
    ngx_http_weir_state_t  *st;

    st = ngx_http_weir_state(r, 0);
    status = (st == NULL) ? 0 : (data ? st->conn_status : st->req_status);

    if (status == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    name = data ? &ngx_http_weir_conn_status_names[status - 1]
                : &ngx_http_weir_req_status_names[status - 1];

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = name->len;
    v->data = name->data;

    return NGX_OK;
}


#if (WEIR_TEST_HOOKS)

/* "action=A limit=L wait_ns=N exempt=E dry_run=D": the last policy verdict */

static u_char *
ngx_http_weir_test_name(u_char *p, weir_engine *e, int32_t i)
{
    size_t          len;
    const uint8_t  *name;

    if (i < 0 || weir_engine_limit_name(e, i, &name, &len) != WEIR_OK) {
        return ngx_cpymem(p, "-", 1);
    }

    return ngx_cpymem(p, name, ngx_min(len, 200));
}


static ngx_int_t
ngx_http_weir_test_verdict_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                 *p;
    weir_verdict           *vd;
    ngx_http_weir_state_t  *st;

    static const char  *actions[] = { "pass", "delay", "reject", "queue" };

    st = ngx_http_weir_state(r, 0);

    if (st == NULL || !st->evaluated) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, 1024);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;
    vd = &st->verdict;

    if (st->bad_target) {
        p = ngx_sprintf(p, "action=bad_request");

    } else {
        p = ngx_sprintf(p, "action=%s limit=",
                        (vd->action >= 0 && vd->action <= 3)
                        ? actions[vd->action] : "unknown");
        p = ngx_http_weir_test_name(p, st->engine, vd->limit);
        p = ngx_sprintf(p, " wait_ns=%uL exempt=%i status=%ui dry_run=%s",
                        vd->wait_ns, (ngx_int_t) vd->exempt,
                        (ngx_uint_t) vd->status,
                        vd->dry_run_limit < 0 ? "-"
                        : vd->dry_run_action == WEIR_REJECT ? "reject"
                        : "delay");
    }

    v->len = p - v->data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}

#endif


/* shared memory */

/*
 * The zone's slab pool keeps its header at the start of the segment; weir's
 * table goes into one page-aligned allocation from it, found again through
 * shpool->data when the segment outlives a reload.
 */

static void *
ngx_http_weir_shm_region(ngx_shm_zone_t *shm_zone, ngx_uint_t reuse,
    size_t *len)
{
    size_t            size;
    ngx_slab_pool_t  *shpool;

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if ((reuse || shm_zone->shm.exists) && shpool->data) {
        *len = *(size_t *) shpool->data;
        return (u_char *) shpool->data + ngx_pagesize;
    }

    if (*len == 0) {
        size = shpool->pfree << ngx_pagesize_shift;
        if (size <= ngx_pagesize) {
            return NULL;
        }

        *len = size - ngx_pagesize;
    }

    /* one page in front of the region records its length */

    shpool->data = ngx_slab_alloc(shpool, *len + ngx_pagesize);
    if (shpool->data == NULL) {
        return NULL;
    }

    *(size_t *) shpool->data = *len;

    return (u_char *) shpool->data + ngx_pagesize;
}


static ngx_int_t
ngx_http_weir_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_weir_zone_ctx_t  *octx = data;

    int                        existed;
    void                      *region;
    size_t                     len, rescaled;
    weir_error                *err;
    ngx_http_weir_zone_ctx_t  *ctx;

    ctx = shm_zone->data;

    if (octx) {
        if (ctx->key.value.len != octx->key.value.len
            || ngx_strncmp(ctx->key.value.data, octx->key.value.data,
                           ctx->key.value.len)
               != 0)
        {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "weir zone \"%V\" uses the \"%V\" key "
                          "while previously it used the \"%V\" key",
                          &shm_zone->shm.name, &ctx->key.value,
                          &octx->key.value);
            return NGX_ERROR;
        }
    }

    len = 0;
    region = ngx_http_weir_shm_region(shm_zone, octx != NULL, &len);

    if (region == NULL) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "weir zone \"%V\" is too small", &shm_zone->shm.name);
        return NGX_ERROR;
    }

    err = NULL;

    /*
     * a region without a table is fresh slab pages of a new zone, all zero:
     * only its header is written, so a large zone costs nothing until used
     */

    if (weir_zone_attach_zeroed(region, len, ctx->schema, 0, &existed,
                                &ctx->zone, &err)
        != WEIR_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "weir zone \"%V\": %s", &shm_zone->shm.name,
                      weir_error_message(err));
        weir_error_free(err);
        return NGX_ERROR;
    }

    if (ctx->kind != NGX_HTTP_WEIR_GCRA) {
        return NGX_OK;
    }

    /* a changed rate: every key keeps its excess, as with limit_req */

    rescaled = 0;

    if (weir_zone_set_gcra_rate(ctx->zone, ctx->count, ctx->period_ns,
                                weir_now_ns(), &rescaled)
        != WEIR_OK)
    {
        return NGX_ERROR;
    }

    if (rescaled) {
        ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                      "weir zone \"%V\": the rate changed; live keys keep "
                      "their excess (%uz)", &shm_zone->shm.name, rescaled);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_weir_init_policy_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_weir_pzone_t  *pz;

    size_t  len;

    pz = shm_zone->data;

    len = pz->bytes;
    pz->region = ngx_http_weir_shm_region(shm_zone, data != NULL, &len);

    if (pz->region == NULL || len != pz->bytes) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "could not place weir policy zone \"%V\" "
                      "(%uz bytes) in shared memory",
                      &shm_zone->shm.name, pz->bytes);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The counters zone is the last weir zone nginx initializes: by then every
 * policy zone has its region, and the engine is attached here, in the
 * master, before the workers fork.  A failure here fails the reload (the
 * running configuration stays), unlike one in the init module handler,
 * which is fatal to the master.
 */

static ngx_int_t
ngx_http_weir_init_counters_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_int_t                   rc;
    ngx_uint_t                  i, n;
    weir_error                 *err;
    weir_region                *regions, *cluster, counters;
    ngx_http_weir_pzone_t      *cz, **pz;
    ngx_http_weir_main_conf_t  *wmcf;

    if (ngx_http_weir_init_policy_zone(shm_zone, data) != NGX_OK) {
        return NGX_ERROR;
    }

    cz = shm_zone->data;
    wmcf = cz->conf;
    n = wmcf->pzones.nelts;

    regions = ngx_calloc(2 * (n + 1) * sizeof(weir_region), shm_zone->shm.log);
    if (regions == NULL) {
        return NGX_ERROR;
    }

    cluster = regions + n + 1;

    pz = wmcf->pzones.elts;

    for (i = 0; i < n; i++) {
        regions[i].ptr = pz[i]->region;
        regions[i].len = pz[i]->bytes;

        if (pz[i]->cluster) {
            cluster[i].ptr = pz[i]->cluster->region;
            cluster[i].len = pz[i]->cluster->bytes;
        }
    }

    counters.ptr = cz->region;
    counters.len = cz->bytes;

    err = NULL;
    rc = NGX_OK;

    /*
     * the master attaches (and on first start formats) the regions; the
     * cluster syncer threads start in each worker: threads do not survive
     * fork(), and the workers elect one syncer among themselves; a region
     * without a table is fresh slab pages of a new zone, all zero, so only
     * its header is written and a large zone costs nothing until used
     */

    if (weir_engine_attach_shared(wmcf->policy, regions, n, cluster,
                                  &counters, 0,
                                  WEIR_ATTACH_DEFER_SYNC|WEIR_ATTACH_ZEROED,
                                  &wmcf->engine, &err)
        != WEIR_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "weir policy \"%V\": %s in %V", &wmcf->policy_file,
                      weir_error_message(err), &wmcf->policy_conf);
        weir_error_free(err);
        rc = NGX_ERROR;
    }

    ngx_free(regions);

    return rc;
}


/*
 * Adds the shared memory zone of a policy zone, its cluster region or the
 * counters, named "PREFIX:ID", where ID identifies the layout (the zone's
 * schema, the limits' fingerprint): nginx keeps a segment across a reload
 * only for the same name and size, so a changed layout gets fresh memory
 * while the old workers finish with the old one.  *prev is the zone of the
 * running configuration when it had another layout, NULL otherwise.
 */

static ngx_shm_zone_t *
ngx_http_weir_add_pzone(ngx_conf_t *cf, ngx_http_weir_pzone_t *pz,
    char *prefix, u_char *name, size_t len, uint64_t id, size_t size,
    ngx_http_weir_pzone_t **prev)
{
    ngx_str_t        s;
    ngx_shm_zone_t  *shm_zone, *old;

    s.len = ngx_strlen(prefix) + len + 1 + 16;
    s.data = ngx_pnalloc(cf->pool, s.len);
    if (s.data == NULL) {
        return NULL;
    }

    ngx_sprintf(s.data, "%s%*s:%016xL", prefix, len, name, id);

    shm_zone = ngx_shared_memory_add(cf, &s, size, &ngx_http_weir_module);
    if (shm_zone == NULL) {
        return NULL;
    }

    if (shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate weir zone \"%V\"", &s);
        return NULL;
    }

    shm_zone->init = ngx_http_weir_init_policy_zone;
    shm_zone->data = pz;
    pz->shm_zone = shm_zone;

    /* the same zone in the running configuration: same name up to the ID */

    *prev = NULL;
    old = ngx_http_weir_old_zone(cf, &s, s.len - 16);

    if (old
        && (ngx_strncmp(old->shm.name.data, s.data, s.len) != 0
            || old->shm.size != shm_zone->shm.size))
    {
        *prev = old->data;
    }

    return shm_zone;
}


/* the running configuration's weir zone whose name starts the same */

static ngx_shm_zone_t *
ngx_http_weir_old_zone(ngx_conf_t *cf, ngx_str_t *name, size_t prefix)
{
    ngx_uint_t        i;
    ngx_shm_zone_t   *old;
    ngx_list_part_t  *part;

    part = &cf->cycle->old_cycle->shared_memory.part;
    old = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            old = part->elts;
            i = 0;
        }

        if (old[i].tag == &ngx_http_weir_module
            && old[i].shm.name.len == name->len
            && ngx_strncmp(old[i].shm.name.data, name->data, prefix) == 0)
        {
            return &old[i];
        }
    }
}


/*
 * Cluster zones: each worker runs a syncer thread (one of them, elected
 * through the zone's table, talks to Redis).  The syncers' messages are not
 * logged from their threads, as nginx's logging is not thread-safe: weir
 * queues them and a timer of the worker drains the queue into the error log.
 */

static ngx_event_t  ngx_http_weir_log_ev;
static ngx_uint_t   ngx_http_weir_syncing;


static ngx_int_t
ngx_http_weir_init_process(ngx_cycle_t *cycle)
{
    sigset_t                    all, old;
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    weir_error                 *err;
    ngx_http_weir_pzone_t     **pz;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_weir_module);

    if (wmcf == NULL || wmcf->engine == NULL) {
        return NGX_OK;
    }

    pz = wmcf->pzones.elts;

    for (i = 0; i < wmcf->pzones.nelts; i++) {
        if (pz[i]->cluster) {
            break;
        }
    }

    if (i == wmcf->pzones.nelts) {
        return NGX_OK;
    }

    weir_cluster_log_queue();

    /* the syncer threads must not take the worker's signals */

    sigfillset(&all);

    if (pthread_sigmask(SIG_BLOCK, &all, &old) != 0) {
        /* the worker still serves requests, on the fallback share */
        ngx_log_error(NGX_LOG_ALERT, cycle->log, ngx_errno,
                      "pthread_sigmask() failed, no weir cluster syncer");
        return NGX_OK;
    }

    err = NULL;
    rc = weir_engine_start_sync(wmcf->engine, &err);

    (void) pthread_sigmask(SIG_SETMASK, &old, NULL);

    if (rc != WEIR_OK) {
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                      "weir: cannot start the cluster syncers: %s",
                      weir_error_message(err));
        weir_error_free(err);

        /* those that started are stopped at exit and their messages drained */
    }

    ngx_http_weir_syncing = 1;

    ngx_http_weir_log_ev.handler = ngx_http_weir_cluster_log;
    ngx_http_weir_log_ev.log = cycle->log;
    ngx_http_weir_log_ev.data = cycle;
    ngx_http_weir_log_ev.cancelable = 1;

    ngx_add_timer(&ngx_http_weir_log_ev, 200);

    return NGX_OK;
}


static void
ngx_http_weir_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_weir_main_conf_t  *wmcf;

    if (!ngx_http_weir_syncing) {
        return;
    }

    wmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_weir_module);

    if (wmcf && wmcf->engine) {
        /* the leader resigns: another worker takes over at once */
        weir_engine_stop_sync(wmcf->engine);
    }

    ngx_http_weir_syncing = 0;

    ngx_http_weir_cluster_log(NULL);
}


static void
ngx_http_weir_cluster_log(ngx_event_t *ev)
{
    size_t  n;
    u_char  buf[512];

    for ( ;; ) {
        n = weir_cluster_log_pop(buf, sizeof(buf));
        if (n == 0) {
            break;
        }

        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0, "weir: %*s", n, buf);
    }

    if (ev && !ngx_exiting && !ngx_quit && !ngx_terminate) {
        ngx_add_timer(ev, 200);
    }
}


/* configuration */

static void *
ngx_http_weir_create_main_conf(ngx_conf_t *cf)
{
    ngx_pool_cleanup_t         *cln;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_main_conf_t));
    if (wmcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&wmcf->limits, cf->pool, 4,
                       sizeof(ngx_http_weir_limit_t *))
        != NGX_OK
        || ngx_array_init(&wmcf->zones, cf->pool, 4,
                          sizeof(ngx_http_weir_zone_ctx_t *))
           != NGX_OK
        || ngx_array_init(&wmcf->pzones, cf->pool, 4,
                          sizeof(ngx_http_weir_pzone_t *))
           != NGX_OK)
    {
        return NULL;
    }

    /* weir's handles are freed with the configuration's pool */

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_weir_free_conf;
    cln->data = wmcf;

    return wmcf;
}


static void
ngx_http_weir_free_conf(void *data)
{
    ngx_http_weir_main_conf_t  *wmcf = data;

    ngx_uint_t                  i;
    ngx_http_weir_limit_t     **limits;
    ngx_http_weir_zone_ctx_t  **zones;

    limits = wmcf->limits.elts;

    for (i = 0; i < wmcf->limits.nelts; i++) {
        weir_limiter_free(limits[i]->limiter);
        limits[i]->limiter = NULL;
    }

    zones = wmcf->zones.elts;

    for (i = 0; i < wmcf->zones.nelts; i++) {
        weir_zone_free(zones[i]->zone);
        zones[i]->zone = NULL;
    }

    weir_engine_free(wmcf->engine);
    wmcf->engine = NULL;

    weir_policy_free(wmcf->policy);
    wmcf->policy = NULL;
}


static void *
ngx_http_weir_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_weir_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->req_limits = NULL;
     *     conf->conn_limits = NULL;
     */

    conf->req_log_level = NGX_CONF_UNSET_UINT;
    conf->req_status_code = NGX_CONF_UNSET_UINT;
    conf->req_dry_run = NGX_CONF_UNSET;
    conf->conn_log_level = NGX_CONF_UNSET_UINT;
    conf->conn_status_code = NGX_CONF_UNSET_UINT;
    conf->conn_dry_run = NGX_CONF_UNSET;
    conf->enable = NGX_CONF_UNSET;
    conf->headers = NGX_CONF_UNSET;
    conf->queue_timeout = NGX_CONF_UNSET_MSEC;
    conf->queue_poll = NGX_CONF_UNSET_MSEC;

    return conf;
}


static char *
ngx_http_weir_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_weir_loc_conf_t *prev = parent;
    ngx_http_weir_loc_conf_t *conf = child;

    ngx_http_weir_main_conf_t  *wmcf;

    if (conf->req_limits == NULL) {
        conf->req_limits = prev->req_limits;
    }

    if (conf->conn_limits == NULL) {
        conf->conn_limits = prev->conn_limits;
    }

    ngx_conf_merge_uint_value(conf->req_log_level, prev->req_log_level,
                              NGX_LOG_ERR);

    conf->req_delay_log_level = (conf->req_log_level == NGX_LOG_INFO)
                                ? NGX_LOG_INFO : conf->req_log_level + 1;

    ngx_conf_merge_uint_value(conf->req_status_code, prev->req_status_code,
                              NGX_HTTP_SERVICE_UNAVAILABLE);

    ngx_conf_merge_value(conf->req_dry_run, prev->req_dry_run, 0);

    ngx_conf_merge_uint_value(conf->conn_log_level, prev->conn_log_level,
                              NGX_LOG_ERR);

    ngx_conf_merge_uint_value(conf->conn_status_code, prev->conn_status_code,
                              NGX_HTTP_SERVICE_UNAVAILABLE);

    ngx_conf_merge_value(conf->conn_dry_run, prev->conn_dry_run, 0);

    ngx_conf_merge_value(conf->enable, prev->enable, 0);

    if (conf->enable == 1) {
        wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

        if (wmcf->policy == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"weir on\" needs a \"weir_policy\" "
                               "in the http block");
            return NGX_CONF_ERROR;
        }
    }
    ngx_conf_merge_value(conf->headers, prev->headers, 1);
    ngx_conf_merge_msec_value(conf->queue_timeout, prev->queue_timeout,
                              NGX_CONF_UNSET_MSEC);
    ngx_conf_merge_msec_value(conf->queue_poll, prev->queue_poll, 10);

    if (conf->queue_poll == 0) {
        conf->queue_poll = 1;
    }

    return NGX_CONF_OK;
}


/* FNV-1a, for the zone schema */

static uint64_t
ngx_http_weir_hash(uint64_t h, u_char *p, size_t len)
{
    if (h == 0) {
        h = 0xcbf29ce484222325ULL;
    }

    while (len--) {
        h ^= *p++;
        h *= 0x100000001b3ULL;
    }

    return h;
}


static char *
ngx_http_weir_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_main_conf_t *wmcf = conf;

    u_char                            *p;
    size_t                             len;
    ssize_t                            size;
    uint64_t                           scale;
    ngx_str_t                         *value, name, s, tag;
    ngx_int_t                          rate, events;
    ngx_msec_t                         window, lease;
    ngx_uint_t                         i, conn;
    ngx_shm_zone_t                    *shm_zone, *old;
    ngx_http_weir_zone_ctx_t          *ctx, *octx, **pctx;
    ngx_http_compile_complex_value_t   ccv;

    value = cf->args->elts;
    conn = (cmd->name.len == sizeof("weir_conn_zone") - 1);

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_zone_ctx_t));
    if (ctx == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = &ctx->key;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    size = 0;
    rate = 0;
    scale = 1;
    events = 0;
    window = 0;
    lease = 0;
    name.len = 0;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {

            name.data = value[i].data + 5;

            p = (u_char *) ngx_strchr(name.data, ':');

            if (p == NULL) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid zone size \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            name.len = p - name.data;

            s.data = p + 1;
            s.len = value[i].data + value[i].len - s.data;

            size = ngx_parse_size(&s);

            if (size == NGX_ERROR) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid zone size \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            if (size < (ssize_t) (8 * ngx_pagesize)) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "zone \"%V\" is too small", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (!conn && ngx_strncmp(value[i].data, "rate=", 5) == 0) {

            len = value[i].len;
            p = value[i].data + len - 3;
            scale = 0;

            if (len > 8) {
                if (ngx_strncmp(p, "r/s", 3) == 0) {
                    scale = 1;

                } else if (ngx_strncmp(p, "r/m", 3) == 0) {
                    scale = 60;

                } else if (ngx_strncmp(p, "r/h", 3) == 0) {
                    scale = 3600;

                } else if (ngx_strncmp(p, "r/d", 3) == 0) {
                    scale = 86400;
                }
            }

            if (scale) {
                len -= 3;

            } else {
                scale = 1;
            }

            rate = ngx_atoi(value[i].data + 5, len - 5);
            if (rate <= 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid rate \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (!conn && ngx_strncmp(value[i].data, "events=", 7) == 0) {

            events = ngx_atoi(value[i].data + 7, value[i].len - 7);
            if (events <= 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid events \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (!conn && ngx_strncmp(value[i].data, "window=", 7) == 0) {

            s.data = value[i].data + 7;
            s.len = value[i].len - 7;

            window = ngx_parse_time(&s, 0);
            if (window == (ngx_msec_t) NGX_ERROR || window == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid window \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (conn && ngx_strncmp(value[i].data, "lease=", 6) == 0) {

            s.data = value[i].data + 6;
            s.len = value[i].len - 6;

            lease = ngx_parse_time(&s, 0);
            if (lease == (ngx_msec_t) NGX_ERROR || lease == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid lease \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (conn) {
        ctx->kind = NGX_HTTP_WEIR_CONCURRENCY;
        ctx->lease_ns = (uint64_t) lease * 1000000;
        ngx_str_set(&tag, "concurrency");

    } else if (events || window) {

        if (rate) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"rate\" cannot be combined with "
                               "\"events\" and \"window\"");
            return NGX_CONF_ERROR;
        }

        if (events == 0 || window == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "a sliding window needs both "
                               "\"events\" and \"window\"");
            return NGX_CONF_ERROR;
        }

        ctx->kind = NGX_HTTP_WEIR_SLIDING;
        ctx->count = events;
        ctx->period_ns = (uint64_t) window * 1000000;
        ngx_str_set(&tag, "sliding");

    } else {
        if (rate == 0) {
            rate = 1;
        }

        ctx->kind = NGX_HTTP_WEIR_GCRA;

        if (scale <= 60) {
            /* nginx keeps the rate in milli-requests per second */
            ctx->count = (uint64_t) rate * 1000 / scale;
            ctx->period_ns = 1000 * NGX_HTTP_WEIR_NS;

            if (ctx->count == 0) {
                ctx->count = 1;
            }

        } else {
            ctx->count = rate;
            ctx->period_ns = scale * NGX_HTTP_WEIR_NS;
        }

        ngx_str_set(&tag, "gcra");
    }

    /* a changed key or algorithm makes the old state meaningless */

    ctx->schema = ngx_http_weir_hash(0, ctx->key.value.data,
                                     ctx->key.value.len);
    ctx->schema = ngx_http_weir_hash(ctx->schema, tag.data, tag.len);

    if (ctx->kind == NGX_HTTP_WEIR_SLIDING) {
        ctx->schema = ngx_http_weir_hash(ctx->schema,
                                         (u_char *) &ctx->period_ns,
                                         sizeof(uint64_t));
    }

    shm_zone = ngx_shared_memory_add(cf, &name, size, &ngx_http_weir_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (shm_zone->data) {
        ctx = shm_zone->data;

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V \"%V\" is already bound to key \"%V\"",
                           &cmd->name, &name, &ctx->key.value);
        return NGX_CONF_ERROR;
    }

    /*
     * the memory of a zone kept with the same name and size is shared with
     * the running workers, which go on reading its states the old way
     */

    old = ngx_http_weir_old_zone(cf, &name, name.len);

    if (old && old->init == ngx_http_weir_init_zone
        && old->shm.size == shm_zone->shm.size)
    {
        octx = old->data;

        if (octx->schema != ctx->schema
            && octx->key.value.len == ctx->key.value.len
            && ngx_strncmp(octx->key.value.data, ctx->key.value.data,
                           ctx->key.value.len)
               == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "weir zone \"%V\" changed its algorithm or "
                               "window; give the zone a new name or another "
                               "size to start it afresh", &name);
            return NGX_CONF_ERROR;
        }
    }

    ctx->shm_zone = shm_zone;

    shm_zone->init = ngx_http_weir_init_zone;
    shm_zone->data = ctx;

    pctx = ngx_array_push(&wmcf->zones);
    if (pctx == NULL) {
        return NGX_CONF_ERROR;
    }

    *pctx = ctx;

    return NGX_CONF_OK;
}


static ngx_http_weir_limit_t *
ngx_http_weir_add_limit(ngx_conf_t *cf, ngx_array_t **limits,
    ngx_shm_zone_t *shm_zone)
{
    ngx_uint_t                   i;
    ngx_http_weir_limit_t       *limit, **p;
    ngx_http_weir_main_conf_t   *wmcf;

    if (*limits == NULL) {
        *limits = ngx_array_create(cf->pool, 1,
                                   sizeof(ngx_http_weir_limit_t *));
        if (*limits == NULL) {
            return NULL;
        }
    }

    p = (*limits)->elts;

    for (i = 0; i < (*limits)->nelts; i++) {
        if (shm_zone == p[i]->shm_zone) {
            return NGX_CONF_UNSET_PTR;
        }
    }

    limit = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_limit_t));
    if (limit == NULL) {
        return NULL;
    }

    limit->shm_zone = shm_zone;
    limit->file = cf->conf_file->file.name;
    limit->line = cf->conf_file->line;

    p = ngx_array_push(*limits);
    if (p == NULL) {
        return NULL;
    }

    *p = limit;

    wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

    p = ngx_array_push(&wmcf->limits);
    if (p == NULL) {
        return NULL;
    }

    *p = limit;

    return limit;
}


static char *
ngx_http_weir_req_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_loc_conf_t  *wlcf = conf;

    ngx_int_t                  burst, delay;
    ngx_str_t                 *value, s;
    ngx_uint_t                 i;
    ngx_shm_zone_t            *shm_zone;
    ngx_http_weir_limit_t     *limit;

    value = cf->args->elts;

    shm_zone = NULL;
    burst = 0;
    delay = 0;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {

            s.len = value[i].len - 5;
            s.data = value[i].data + 5;

            shm_zone = ngx_shared_memory_add(cf, &s, 0,
                                             &ngx_http_weir_module);
            if (shm_zone == NULL) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "burst=", 6) == 0) {

            burst = ngx_atoi(value[i].data + 6, value[i].len - 6);
            if (burst <= 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid burst value \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "delay=", 6) == 0) {

            delay = ngx_atoi(value[i].data + 6, value[i].len - 6);
            if (delay <= 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid delay value \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strcmp(value[i].data, "nodelay") == 0) {
            delay = -1;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (shm_zone == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    limit = ngx_http_weir_add_limit(cf, &wlcf->req_limits, shm_zone);

    if (limit == NULL) {
        return NGX_CONF_ERROR;
    }

    if (limit == NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    limit->burst = burst;
    limit->delay = delay;

    return NGX_CONF_OK;
}


static char *
ngx_http_weir_conn_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_loc_conf_t  *wlcf = conf;

    ngx_int_t                  n;
    ngx_str_t                 *value;
    ngx_shm_zone_t            *shm_zone;
    ngx_http_weir_limit_t     *limit;

    value = cf->args->elts;

    shm_zone = ngx_shared_memory_add(cf, &value[1], 0, &ngx_http_weir_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    n = ngx_atoi(value[2].data, value[2].len);
    if (n <= 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid number of connections \"%V\"", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (n > 65535) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "connection limit must be less 65536");
        return NGX_CONF_ERROR;
    }

    limit = ngx_http_weir_add_limit(cf, &wlcf->conn_limits, shm_zone);

    if (limit == NULL) {
        return NGX_CONF_ERROR;
    }

    if (limit == NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    limit->conn = n;

    return NGX_CONF_OK;
}


static char *
ngx_http_weir_policy_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_weir_main_conf_t  *wmcf = conf;

    size_t                  i, n;
    ngx_str_t              *value;
    weir_error             *err;
    weir_zone_info          zi;
    ngx_shm_zone_t         *shm_zone;
    ngx_http_weir_pzone_t  *pz, **ppz, *prev;

    if (wmcf->policy_file.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    wmcf->policy_file = value[1];

    if (ngx_conf_full_name(cf->cycle, &wmcf->policy_file, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    err = NULL;

    if (weir_policy_load((const char *) wmcf->policy_file.data,
                         &wmcf->policy, &err)
        != WEIR_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "weir policy: %s",
                           weir_error_message(err));
        weir_error_free(err);
        return NGX_CONF_ERROR;
    }

    wmcf->policy_conf.len = cf->conf_file->file.name.len + NGX_INT_T_LEN + 1;
    wmcf->policy_conf.data = ngx_pnalloc(cf->pool, wmcf->policy_conf.len);
    if (wmcf->policy_conf.data == NULL) {
        return NGX_CONF_ERROR;
    }

    wmcf->policy_conf.len = ngx_sprintf(wmcf->policy_conf.data, "%V:%ui",
                                        &cf->conf_file->file.name,
                                        cf->conf_file->line)
                            - wmcf->policy_conf.data;

    n = weir_policy_zone_count(wmcf->policy);

    for (i = 0; i < n; i++) {

        if (weir_policy_zone(wmcf->policy, i, &zi) != WEIR_OK) {
            return NGX_CONF_ERROR;
        }

        pz = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_pzone_t));
        ppz = ngx_array_push(&wmcf->pzones);
        if (pz == NULL || ppz == NULL) {
            return NGX_CONF_ERROR;
        }

        *ppz = pz;
        pz->bytes = zi.bytes;
        pz->schema = zi.schema;

        pz->layout.len = weir_policy_zone_layout(wmcf->policy, i, NULL, 0);
        pz->layout.data = ngx_pnalloc(cf->pool, pz->layout.len);
        if (pz->layout.data == NULL) {
            return NGX_CONF_ERROR;
        }

        weir_policy_zone_layout(wmcf->policy, i, pz->layout.data,
                                pz->layout.len);

        /* room for the slab pool's own bookkeeping and the length page */

        if (ngx_http_weir_add_pzone(cf, pz, "weir:", (u_char *) zi.name,
                                    zi.name_len, zi.schema,
                                    ngx_align(zi.bytes + zi.bytes / 32
                                              + 16 * ngx_pagesize,
                                              ngx_pagesize),
                                    &prev)
            == NULL)
        {
            return NGX_CONF_ERROR;
        }

        if (prev) {
            ngx_conf_log_error(NGX_LOG_NOTICE, cf, 0,
                               "weir zone \"%*s\" starts with fresh state: "
                               "its layout changed from \"%V\" to \"%V\"",
                               zi.name_len, zi.name, &prev->layout,
                               &pz->layout);
        }

        if (zi.cluster_bytes == 0) {
            continue;
        }

        /*
         * a cluster zone's second region: the other nodes' counts, what
         * this node pushed and the sync health, read by every worker
         */

        pz->cluster = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_pzone_t));
        if (pz->cluster == NULL) {
            return NGX_CONF_ERROR;
        }

        pz->cluster->bytes = zi.cluster_bytes;

        if (ngx_http_weir_add_pzone(cf, pz->cluster, "weir-cluster:",
                                    (u_char *) zi.name, zi.name_len,
                                    zi.schema,
                                    ngx_align(zi.cluster_bytes
                                              + zi.cluster_bytes / 32
                                              + 16 * ngx_pagesize,
                                              ngx_pagesize),
                                    &prev)
            == NULL)
        {
            return NGX_CONF_ERROR;
        }
    }

    /*
     * the engine's counters, in shared memory so that every worker adds to
     * and weir_status reports the same numbers; added last, so that its
     * init, which attaches the engine, runs after every policy zone's
     */

    pz = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_pzone_t));
    if (pz == NULL) {
        return NGX_CONF_ERROR;
    }

    pz->bytes = weir_policy_counters_bytes(wmcf->policy);
    pz->conf = wmcf;

    shm_zone = ngx_http_weir_add_pzone(cf, pz, "weir-counters",
                                       (u_char *) "", 0,
                                       weir_policy_counters_fingerprint(
                                           wmcf->policy),
                                       ngx_align(pz->bytes
                                                 + 16 * ngx_pagesize,
                                                 ngx_pagesize),
                                       &prev);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (prev) {
        ngx_conf_log_error(NGX_LOG_NOTICE, cf, 0,
                           "weir counters start from zero: "
                           "the policy's limits changed");
    }

    shm_zone->init = ngx_http_weir_init_counters_zone;
    wmcf->counters = pz;

    return NGX_CONF_OK;
}


/* weir_status: Prometheus text */

static ngx_int_t
ngx_http_weir_status_handler(ngx_http_request_t *r)
{
    int                         wrc;
    size_t                      len, cap, need;
    u_char                      dummy[1];
    ngx_int_t                   rc;
    ngx_buf_t                  *b;
    ngx_uint_t                  i, n;
    ngx_chain_t                 out;
    weir_named_zone            *named;
    ngx_http_weir_zone_ctx_t  **zones;
    ngx_http_weir_main_conf_t  *wmcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    /*
     * the policy's counters and the directive zones' in one text:
     * each metric family once, zones of both kinds in weir_zone_*
     */

    zones = wmcf->zones.elts;
    named = ngx_pcalloc(r->pool,
                        (wmcf->zones.nelts + 1) * sizeof(weir_named_zone));
    if (named == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < wmcf->zones.nelts; i++) {
        named[i].zone = zones[i]->zone;
        named[i].name = zones[i]->shm_zone->shm.name.data;
        named[i].name_len = zones[i]->shm_zone->shm.name.len;
    }

    /* counters may gain digits between the calls: room to spare, retry */

    b = NULL;
    need = 0;
    wrc = weir_prometheus(wmcf->engine, named, wmcf->zones.nelts, dummy, 0,
                          &need);

    for (n = 0; n < 3 && wrc == WEIR_ERR_BUFFER_TOO_SMALL; n++) {
        cap = need + need / 8 + 256;

        b = ngx_create_temp_buf(r->pool, cap);
        if (b == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        wrc = weir_prometheus(wmcf->engine, named, wmcf->zones.nelts,
                              b->last, cap, &need);
    }

    if (wrc != WEIR_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (b == NULL) {
        b = ngx_calloc_buf(r->pool);
        if (b == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    b->last += need;
    len = b->last - b->pos;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = len;
    ngx_str_set(&r->headers_out.content_type,
                "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    if (r->method == NGX_HTTP_HEAD || len == 0) {
        r->header_only = 1;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


static char *
ngx_http_weir_status_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_weir_status_handler;

    return NGX_CONF_OK;
}


#if (WEIR_TEST_HOOKS)

static char *
ngx_http_weir_test_clock(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_main_conf_t  *wmcf = conf;

    ngx_str_t                         *value;
    ngx_http_compile_complex_value_t   ccv;

    value = cf->args->elts;

    wmcf->test_now = ngx_pcalloc(cf->pool, sizeof(ngx_http_complex_value_t));
    wmcf->test_peer = ngx_pcalloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (wmcf->test_now == NULL || wmcf->test_peer == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = wmcf->test_now;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
    ccv.cf = cf;
    ccv.value = &value[2];
    ccv.complex_value = wmcf->test_peer;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                       "weir test hooks are enabled: clients can set the "
                       "time and their address; never use this build in "
                       "production");

    return NGX_CONF_OK;
}

#endif


static ngx_int_t
ngx_http_weir_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_weir_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


/* limiters need the zone's parameters, known once the whole file is read */

static ngx_int_t
ngx_http_weir_init(ngx_conf_t *cf)
{
    int                          rc;
    ngx_uint_t                   i;
    weir_error                  *err;
    ngx_http_handler_pt         *h;
    ngx_http_weir_limit_t      **limits, *lim;
    ngx_http_weir_zone_ctx_t    *ctx;
    ngx_http_core_main_conf_t   *cmcf;
    ngx_http_weir_main_conf_t   *wmcf;

    wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

    limits = wmcf->limits.elts;

    for (i = 0; i < wmcf->limits.nelts; i++) {
        lim = limits[i];
        ctx = lim->shm_zone->data;

        if (ctx == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "unknown weir zone \"%V\" in %V:%ui",
                          &lim->shm_zone->shm.name, &lim->file, lim->line);
            return NGX_ERROR;
        }

        err = NULL;

        if (lim->conn) {
            if (ctx->kind != NGX_HTTP_WEIR_CONCURRENCY) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "weir_conn uses the weir_req_zone \"%V\" "
                              "in %V:%ui", &lim->shm_zone->shm.name,
                              &lim->file, lim->line);
                return NGX_ERROR;
            }

            rc = weir_limiter_concurrency(lim->conn, ctx->lease_ns,
                                          &lim->limiter, &err);

        } else if (ctx->kind == NGX_HTTP_WEIR_CONCURRENCY) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "weir_req uses the weir_conn_zone \"%V\" in %V:%ui",
                          &lim->shm_zone->shm.name, &lim->file, lim->line);
            return NGX_ERROR;

        } else if (ctx->kind == NGX_HTTP_WEIR_SLIDING) {
            if (lim->burst || lim->delay) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "\"burst\", \"delay\" and \"nodelay\" do not "
                              "apply to the sliding window zone \"%V\" "
                              "in %V:%ui", &lim->shm_zone->shm.name,
                              &lim->file, lim->line);
                return NGX_ERROR;
            }

            rc = weir_limiter_sliding(ctx->count, ctx->period_ns,
                                      &lim->limiter, &err);

        } else {
            if (lim->delay > lim->burst) {
                /* nginx treats delay beyond the burst as nodelay */
                lim->delay = -1;
            }

            rc = weir_limiter_gcra(ctx->count, ctx->period_ns, lim->burst,
                                   lim->delay, &lim->limiter, &err);
        }

        if (rc != WEIR_OK) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "weir: %s in %V:%ui", weir_error_message(err),
                          &lim->file, lim->line);
            weir_error_free(err);
            return NGX_ERROR;
        }
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_weir_handler;

    return NGX_OK;
}

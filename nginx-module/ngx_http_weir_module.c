
/*
 * weir: nginx module.
 *
 * Directives shaped like limit_req / limit_conn (weir_req_zone, weir_req,
 * weir_conn_zone, weir_conn, ...) and a policy mode (weir_policy, weir).
 * Every limiting decision is made by libweir through its C ABI; the module
 * only moves requests, keys, timers and shared memory between nginx and weir.
 *
 * This file: the module, its directives and configuration, the preaccess
 * handler, the per-request state and the delays.
 */


#include "ngx_http_weir_module.h"


static ngx_int_t ngx_http_weir_handler(ngx_http_request_t *r);
static void ngx_http_weir_cleanup(void *data);
static void *ngx_http_weir_create_main_conf(ngx_conf_t *cf);
static void ngx_http_weir_free_conf(void *data);
static void *ngx_http_weir_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_weir_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_weir_init(ngx_conf_t *cf);
static char *ngx_http_weir_obsolete(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


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
      WEIR_ALGORITHM_GCRA,
      NULL },

    { ngx_string("weir_req"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE123,
      ngx_http_weir_limit_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, req_limits),
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
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_weir_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      WEIR_ALGORITHM_CONCURRENCY,
      NULL },

    { ngx_string("weir_conn"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE2,
      ngx_http_weir_limit_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_weir_loc_conf_t, conn_limits),
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
      ngx_http_weir_obsolete,
      0,
      0,
      NULL },

    { ngx_string("weir_queue_poll"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_weir_obsolete,
      0,
      0,
      NULL },

    { ngx_string("weir_status"),
      NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
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


static ngx_int_t
ngx_http_weir_handler(ngx_http_request_t *r)
{
    ngx_int_t                   rc;
    ngx_http_weir_state_t      *st;
    ngx_http_weir_loc_conf_t   *wlcf;
    ngx_http_weir_main_conf_t  *wmcf;

    wlcf = ngx_http_get_module_loc_conf(r, ngx_http_weir_module);
    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    if ((wlcf->req_sel.n == 0 && wlcf->conn_sel.n == 0)
        || wmcf->dir.engine == NULL)
    {
        if (wlcf->enable != 1 || wmcf->pol.engine == NULL) {
            return NGX_DECLINED;
        }
    }

    st = ngx_http_weir_state(r, 1);
    if (st == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (wlcf->req_sel.n && wmcf->dir.engine && st->req_status.len == 0) {
        rc = ngx_http_weir_limit(r, wlcf, st, 0);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    if (wlcf->conn_sel.n && wmcf->dir.engine && st->conn_status.len == 0) {
        rc = ngx_http_weir_limit(r, wlcf, st, 1);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    if (wlcf->enable == 1 && wmcf->pol.engine && !st->policy_done) {
        return ngx_http_weir_policy(r, wlcf, st);
    }

    return NGX_DECLINED;
}


/*
 * acts on what the engine made of a verdict: logs its lines (weir_req's
 * and weir_conn's at the location's levels), rejects or delays
 */

ngx_int_t
ngx_http_weir_act(ngx_http_request_t *r, weir_outcome *o,
    ngx_uint_t reject_level, ngx_uint_t delay_level)
{
    ngx_uint_t         i, level;
    weir_log_line     *line;
    static ngx_uint_t  levels[] = {
        NGX_LOG_INFO, NGX_LOG_NOTICE, NGX_LOG_WARN, NGX_LOG_ERR
    };

    for (i = 0; i < o->lines; i++) {
        line = &o->line[i];

        if (line->level == WEIR_LOG_HOST_REJECT) {
            level = reject_level;

        } else if (line->level == WEIR_LOG_HOST_DELAY) {
            level = delay_level;

        } else {
            level = levels[line->level & 3];
        }

        ngx_log_error(level, r->connection->log, 0, "%*s", line->len,
                      line->text);
    }

    if (o->action == WEIR_REJECT) {
        return o->status;
    }

    if (o->action == WEIR_DELAY) {
        return ngx_http_weir_wait(r, o->wait_ms, ngx_http_weir_delay_handler);
    }

    return NGX_DECLINED;
}


/* continues the phases of a request that a delay or a queue held */

void
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

ngx_int_t
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


/*
 * the write event of a held request fired before its timer (the client
 * became writable): keeps waiting and returns 1; 0 once the timer expired
 */

ngx_int_t
ngx_http_weir_waiting(ngx_http_request_t *r)
{
    ngx_event_t  *wev;

    wev = r->connection->write;

    if (!wev->delayed) {
        return 0;
    }

    if (ngx_handle_write_event(wev, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }

    return 1;
}


void
ngx_http_weir_delay_handler(ngx_http_request_t *r)
{
    if (!ngx_http_weir_waiting(r)) {
        ngx_http_weir_resume(r);
    }
}


static void
ngx_http_weir_cleanup(void *data)
{
    ngx_http_weir_state_t  *st = data;

    if (st->request == NULL) {
        return;
    }

    /*
     * the request is being freed: no variables can be evaluated now;
     * what its response's end did not give back goes back now
     */

    ngx_http_weir_release(st, 1);
}


ngx_http_weir_state_t *
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

    /*
     * the cleanup and the state in one allocation (ngx_pool_cleanup_add
     * makes two), linked as ngx_pool_cleanup_add links it
     */

    cln = ngx_palloc(r->main->pool,
                     sizeof(ngx_pool_cleanup_t) + sizeof(ngx_http_weir_state_t));
    if (cln == NULL) {
        return NULL;
    }

    st = (ngx_http_weir_state_t *) (cln + 1);
    ngx_memzero(st, offsetof(ngx_http_weir_state_t, conn_verdict));

    st->request = r->main;

    cln->handler = ngx_http_weir_cleanup;
    cln->data = st;
    cln->next = r->main->pool->cleanup;
    r->main->pool->cleanup = cln;

    ngx_http_set_ctx(r->main, st, ngx_http_weir_module);

    return st;
}


uint64_t
ngx_http_weir_now(ngx_http_request_t *r)
{
#if (WEIR_TEST_HOOKS)
    uint64_t  now;

    if (ngx_http_weir_test_now(r, &now) == NGX_OK) {
        return now;
    }
#endif

    return weir_now_ns();
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

    if (ngx_array_init(&wmcf->dzones, cf->pool, 4,
                       sizeof(ngx_http_weir_dzone_t))
        != NGX_OK
        || ngx_array_init(&wmcf->pol.pzones, cf->pool, 4,
                          sizeof(ngx_http_weir_pzone_t *))
           != NGX_OK
        || ngx_array_init(&wmcf->dir.pzones, cf->pool, 4,
                          sizeof(ngx_http_weir_pzone_t *))
           != NGX_OK)
    {
        return NULL;
    }

    ngx_queue_init(&wmcf->pol.waiters);
    ngx_queue_init(&wmcf->dir.waiters);

    wmcf->host = weir_host_limits_new();

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

    weir_engine_free(wmcf->pol.engine);
    weir_engine_free(wmcf->dir.engine);
    wmcf->pol.engine = NULL;
    wmcf->dir.engine = NULL;

    weir_policy_free(wmcf->pol.policy);
    weir_policy_free(wmcf->dir.policy);
    wmcf->pol.policy = NULL;
    wmcf->dir.policy = NULL;

    weir_host_limits_free(wmcf->host);
    wmcf->host = NULL;
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

    ngx_http_weir_status_merge(cf, prev, conf);

    /* the engine limits this block's weir_req and weir_conn select */

    if (conf->req_limits
        && ngx_http_weir_select(cf, conf->req_limits, conf->req_dry_run,
                                conf->req_status_code, &conf->req_sel)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (conf->conn_limits
        && ngx_http_weir_select(cf, conf->conn_limits, conf->conn_dry_run,
                                conf->conn_status_code, &conf->conn_sel)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_conf_merge_value(conf->enable, prev->enable, 0);

    if (conf->enable == 1) {
        wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

        if (wmcf->pol.policy == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"weir on\" needs a \"weir_policy\" "
                               "in the http block");
            return NGX_CONF_ERROR;
        }
    }
    ngx_conf_merge_value(conf->headers, prev->headers, 1);

    return NGX_CONF_OK;
}


/* weir_queue_timeout and weir_queue_poll: the engine times queued requests */

static char *
ngx_http_weir_obsolete(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_conf_log_error(NGX_LOG_WARN, cf, 0, "\"%V\" is ignored: a queued "
                       "request waits for its policy limit's \"timeout\"",
                       &cmd->name);

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_weir_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

    if (ngx_http_weir_init_limits(cf, wmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_weir_handler;

    return NGX_OK;
}

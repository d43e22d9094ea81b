
/*
 * weir: nginx module, weir_req and weir_conn at request time: the engine
 * evaluates the location's limits, the module logs its outcome the way
 * limit_req and limit_conn do and delays, rejects or holds the permits;
 * and the variables $weir_req_status and $weir_conn_status.
 */


#include "ngx_http_weir_module.h"


static int ngx_http_weir_var(void *ctx, size_t index, const uint8_t **value,
    size_t *value_len);
static ngx_int_t ngx_http_weir_evaluate(ngx_http_request_t *r,
    ngx_http_weir_sel_t *sel, weir_verdict *v);
static ngx_str_t *ngx_http_weir_zone_name(ngx_http_request_t *r,
    int32_t limit);


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


/*
 * The engine's variable "NAME": the key of zone "NAME" for this request; an
 * empty one, or one longer than the zone allows (logged), leaves the zone's
 * limits out
 */

static int
ngx_http_weir_var(void *ctx, size_t index, const uint8_t **value,
    size_t *value_len)
{
    ngx_http_request_t  *r = ctx;

    size_t                      len;
    ngx_str_t                   key;
    ngx_uint_t                  i;
    const uint8_t              *name;
    ngx_http_weir_dzone_t      *dz;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    if (index >= wmcf->dzones.nelts) {
        return 0;
    }

    /* the zone of each variable, found on first use in each worker */

    if (wmcf->vars[index] == NULL) {
        if (weir_engine_var_name(wmcf->dir.engine, index, &name, &len)
            != WEIR_OK)
        {
            return 0;
        }

        dz = wmcf->dzones.elts;

        for (i = 0; i < wmcf->dzones.nelts; i++) {
            if (dz[i].name.len == len
                && ngx_strncmp(dz[i].name.data, name, len) == 0)
            {
                wmcf->vars[index] = &dz[i];
            }
        }

        if (wmcf->vars[index] == NULL) {
            return 0;
        }
    }

    dz = wmcf->vars[index];

    if (ngx_http_complex_value(r, &dz->key, &key) != NGX_OK) {
        return 0;
    }

    if (key.len > dz->max_key) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "the value of the \"%V\" key "
                      "is more than %uz bytes: \"%V\"",
                      &dz->key.value, dz->max_key, &key);
        return 0;
    }

    *value = key.data;
    *value_len = key.len;

    return 1;
}


/* NGX_OK with the verdict, NGX_DECLINED when no limit applies */

static ngx_int_t
ngx_http_weir_evaluate(ngx_http_request_t *r, ngx_http_weir_sel_t *sel,
    weir_verdict *v)
{
    int                          wrc;
    weir_request                 wr;
    ngx_http_weir_main_conf_t   *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    ngx_memzero(&wr, sizeof(weir_request));

    wr.header_ctx = r;
    wr.var = ngx_http_weir_var;

    wrc = weir_engine_evaluate_selected(wmcf->dir.engine, &wr, sel->index,
                                        sel->n, ngx_http_weir_now(r), v);

    if (wrc != WEIR_OK) {
        /* fail open, as weir's default failure mode does */
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "weir_engine_evaluate_selected() failed (%d)", wrc);
        return NGX_DECLINED;
    }

    return v->unmatched ? NGX_DECLINED : NGX_OK;
}


static ngx_str_t *
ngx_http_weir_zone_name(ngx_http_request_t *r, int32_t limit)
{
    ngx_http_weir_elimit_t      *el;
    ngx_http_weir_main_conf_t   *wmcf;
    static ngx_str_t             none = ngx_string("");

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    if (limit < 0 || (ngx_uint_t) limit >= wmcf->elimits.nelts) {
        return &none;
    }

    el = wmcf->elimits.elts;

    return &el[limit].limit->zone;
}


ngx_int_t
ngx_http_weir_req(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st)
{
    char          *dry;
    int32_t        action, limit;
    uint64_t       excess;
    weir_verdict   v;

    if (ngx_http_weir_evaluate(r, &wlcf->req_sel, &v) != NGX_OK) {
        return NGX_DECLINED;
    }

    /* a dry-run location reports what its limits would have done */

    if (v.dry_run_limit >= 0) {
        action = v.dry_run_action;
        limit = v.dry_run_limit;
        excess = v.dry_run_excess_milli;
        dry = ", dry run";

    } else {
        action = v.action;
        limit = v.limit;
        excess = v.excess_milli;
        dry = "";
    }

    if (action == WEIR_REJECT) {
        ngx_log_error(wlcf->req_log_level, r->connection->log, 0,
                      "limiting requests%s, excess: %uL.%03uL by zone \"%V\"",
                      dry, excess / 1000, excess % 1000,
                      ngx_http_weir_zone_name(r, limit));

        if (*dry) {
            st->req_status = NGX_HTTP_WEIR_REJECTED_DRY_RUN;
            return NGX_DECLINED;
        }

        st->req_status = NGX_HTTP_WEIR_REJECTED;

        return v.status;
    }

    if (action != WEIR_DELAY) {
        st->req_status = NGX_HTTP_WEIR_PASSED;
        return NGX_DECLINED;
    }

    ngx_log_error(wlcf->req_delay_log_level, r->connection->log, 0,
                  "delaying request%s, excess: %uL.%03uL, by zone \"%V\"",
                  dry, excess / 1000, excess % 1000,
                  ngx_http_weir_zone_name(r, limit));

    if (*dry) {
        st->req_status = NGX_HTTP_WEIR_DELAYED_DRY_RUN;
        return NGX_DECLINED;
    }

    st->req_status = NGX_HTTP_WEIR_DELAYED;

    return ngx_http_weir_wait(r, ngx_http_weir_msec(v.wait_ns),
                              ngx_http_weir_delay_handler);
}


ngx_int_t
ngx_http_weir_conn(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st)
{
    weir_verdict                *v;
    ngx_http_weir_main_conf_t   *wmcf;

    v = &st->conn_verdict;

    if (ngx_http_weir_evaluate(r, &wlcf->conn_sel, v) != NGX_OK) {
        return NGX_DECLINED;
    }

    /* the permits, released when the request ends */

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);
    st->conn_engine = wmcf->dir.engine;

    if (v->dry_run_limit >= 0 && v->dry_run_action == WEIR_REJECT) {
        ngx_log_error(wlcf->conn_log_level, r->connection->log, 0,
                      "limiting connections, dry run, by zone \"%V\"",
                      ngx_http_weir_zone_name(r, v->dry_run_limit));

        st->conn_status = NGX_HTTP_WEIR_CONN_REJECTED_DRY_RUN;
        return NGX_DECLINED;
    }

    if (v->action == WEIR_REJECT) {
        ngx_log_error(wlcf->conn_log_level, r->connection->log, 0,
                      "limiting connections by zone \"%V\"",
                      ngx_http_weir_zone_name(r, v->limit));

        st->conn_status = NGX_HTTP_WEIR_CONN_REJECTED;
        return v->status;
    }

    st->conn_status = NGX_HTTP_WEIR_CONN_PASSED;

    return NGX_DECLINED;
}


/* $weir_req_status (data 0) and $weir_conn_status (data 1) */

ngx_int_t
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


/*
 * weir: nginx module, weir_req and weir_conn at request time: the zones'
 * checks, the delay of weir_req, the permits of weir_conn, and the
 * variables $weir_req_status and $weir_conn_status.
 */


#include "ngx_http_weir_module.h"


/* a weir_req zone charged for this request, refunded if another rejects */

typedef struct {
    ngx_str_t                    key;
    ngx_http_weir_limit_t       *limit;
} ngx_http_weir_charge_t;


/* a weir_conn permit, released when the request ends */

typedef struct {
    ngx_http_weir_limit_t       *limit;
    ngx_http_weir_zone_ctx_t    *ctx;
    weir_permit                  permit;
} ngx_http_weir_held_t;


static ngx_int_t ngx_http_weir_key(ngx_http_request_t *r,
    ngx_http_weir_zone_ctx_t *ctx, size_t max, ngx_str_t *key);
static uint64_t ngx_http_weir_excess(ngx_http_weir_zone_ctx_t *ctx,
    ngx_http_weir_limit_t *lim, weir_check *chk);
static void ngx_http_weir_refund(ngx_http_weir_charge_t *charged,
    ngx_uint_t n, uint64_t now);


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
 * a zone's key for this request: NGX_DECLINED skips the zone (an empty key,
 * or one longer than max bytes, which is logged)
 */

static ngx_int_t
ngx_http_weir_key(ngx_http_request_t *r, ngx_http_weir_zone_ctx_t *ctx,
    size_t max, ngx_str_t *key)
{
    if (ngx_http_complex_value(r, &ctx->key, key) != NGX_OK) {
        return NGX_ERROR;
    }

    if (key->len == 0) {
        return NGX_DECLINED;
    }

    if (key->len > max) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "the value of the \"%V\" key "
                      "is more than %uz bytes: \"%V\"",
                      &ctx->key.value, max, key);
        return NGX_DECLINED;
    }

    return NGX_OK;
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


ngx_int_t
ngx_http_weir_req(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st)
{
    int                          wrc;
    uint64_t                     now, excess, wait, max_wait, max_excess;
    ngx_int_t                    rc;
    ngx_str_t                    key;
    ngx_uint_t                   i, n, k;
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

        rc = ngx_http_weir_key(r, ctx, 65535, &key);

        if (rc == NGX_ERROR) {
            goto failed;
        }

        if (rc == NGX_DECLINED) {
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

            ngx_http_weir_refund(charged, k, now);

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

    return ngx_http_weir_wait(r, ngx_http_weir_msec(max_wait),
                              ngx_http_weir_delay_handler);

failed:

    ngx_http_weir_refund(charged, k, now);

    return NGX_HTTP_INTERNAL_SERVER_ERROR;
}


static void
ngx_http_weir_refund(ngx_http_weir_charge_t *charged, ngx_uint_t n,
    uint64_t now)
{
    ngx_http_weir_zone_ctx_t  *ctx;

    while (n--) {
        ctx = charged[n].limit->shm_zone->data;
        (void) weir_zone_refund(ctx->zone, charged[n].limit->limiter,
                                charged[n].key.data, charged[n].key.len, 1,
                                now);
    }
}


void
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


ngx_int_t
ngx_http_weir_conn(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st)
{
    int                          wrc;
    uint64_t                     now;
    ngx_int_t                    rc;
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

        rc = ngx_http_weir_key(r, ctx, 255, &key);

        if (rc == NGX_ERROR) {
            ngx_http_weir_release_held(st, now);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (rc == NGX_DECLINED) {
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


/*
 * weir: nginx module, its variables; what access logs show of weir's decision:
 * $weir_limit (the deciding limit: policy limit or weir_req / weir_conn
 * zone), $weir_action (pass, exempt, delay, queue, reject, dry-run-delay,
 * dry-run-reject) and $weir_key (the deciding limit's key, rendered by the
 * engine only when a log line asks for it, from what was charged: the main
 * request's line and headers, or the zone's key kept when it decided).
 */


#include "ngx_http_weir_module.h"


#define NGX_HTTP_WEIR_KEY_MAX  512


static ngx_int_t ngx_http_weir_log_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_weir_key_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static int ngx_http_weir_kept_var(void *ctx, size_t index,
    const uint8_t **value, size_t *value_len);


static ngx_http_variable_t  ngx_http_weir_vars[] = {

    { ngx_string("weir_req_status"), NULL,
      ngx_http_weir_status_variable,
      offsetof(ngx_http_weir_state_t, req_status),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("weir_conn_status"), NULL,
      ngx_http_weir_status_variable,
      offsetof(ngx_http_weir_state_t, conn_status),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("weir_limit"), NULL,
      ngx_http_weir_log_variable,
      offsetof(ngx_http_weir_state_t, log_name),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("weir_action"), NULL,
      ngx_http_weir_log_variable,
      offsetof(ngx_http_weir_state_t, log_action),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("weir_key"), NULL,
      ngx_http_weir_key_variable, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

#if (WEIR_TEST_HOOKS)
    { ngx_string("weir_test_verdict"), NULL,
      ngx_http_weir_test_verdict_variable, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },
#endif

      ngx_http_null_variable
};


ngx_int_t
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


/*
 * Records the decision d (a verdict's, from weir_engine_outcome) of engine e
 * (NGX_OK); a later decision replaces it unless it names no limit while the
 * recorded one does (a queued request admitted afterwards stays "queue";
 * weir_conn passing then weir_req rejecting is weir_req's rejection):
 * NGX_DECLINED
 */

ngx_int_t
ngx_http_weir_log_record(ngx_http_weir_state_t *st, weir_engine *e,
    weir_log_decision *d, int style)
{
    if (st->log_engine != NULL && d->limit < 0 && st->log_limit >= 0) {
        return NGX_DECLINED;
    }

    st->log_engine = e;
    st->log_limit = d->limit;
    st->log_policy = (style == WEIR_STYLE_POLICY);
    st->log_name.data = (u_char *) d->name;
    st->log_name.len = d->name_len;
    st->log_action.data = (u_char *) d->action;
    st->log_action.len = d->action_len;
    ngx_str_null(&st->log_key);

    return NGX_OK;
}


static ngx_int_t
ngx_http_weir_log_str(ngx_http_variable_value_t *v, u_char *data, size_t len)
{
    if (len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->len = len;
    v->data = data;

    return NGX_OK;
}


/* $weir_limit and $weir_action: data is the state's field */

static ngx_int_t
ngx_http_weir_log_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t              *s;
    ngx_http_weir_state_t  *st;

    st = ngx_http_weir_state(r, 0);

    if (st == NULL || st->log_engine == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    s = (ngx_str_t *) ((u_char *) st + data);

    return ngx_http_weir_log_str(v, s->data, s->len);
}


/*
 * $weir_key: the engine renders it from the request as it was evaluated:
 * in policy mode the main request (its line and headers stay through
 * internal redirects), for a zone the key kept when it decided (its
 * variables, $uri say, may have changed since)
 */

static ngx_int_t
ngx_http_weir_key_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    size_t                  len;
    u_char                 *buf;
    weir_request            wr;
    ngx_http_weir_state_t  *st;

    st = ngx_http_weir_state(r, 0);

    if (st == NULL || st->log_engine == NULL || st->log_limit < 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    if (st->log_policy) {
        ngx_http_weir_request(r, &wr);

    } else if (st->log_key.len) {
        ngx_memzero(&wr, sizeof(weir_request));

        wr.header_ctx = st;
        wr.var = ngx_http_weir_kept_var;

    } else {
        v->not_found = 1;
        return NGX_OK;
    }

    buf = ngx_pnalloc(r->pool, NGX_HTTP_WEIR_KEY_MAX);
    if (buf == NULL) {
        return NGX_ERROR;
    }

    if (weir_engine_render_key(st->log_engine, st->log_limit, &wr, buf,
                               NGX_HTTP_WEIR_KEY_MAX, &len)
        != WEIR_OK)
    {
        v->not_found = 1;
        return NGX_OK;
    }

    return ngx_http_weir_log_str(v, buf, len);
}


/* a zone's limit has one key part, its variable: the kept key */

static int
ngx_http_weir_kept_var(void *ctx, size_t index, const uint8_t **value,
    size_t *value_len)
{
    ngx_http_weir_state_t  *st = ctx;

    *value = st->log_key.data;
    *value_len = st->log_key.len;

    return 1;
}

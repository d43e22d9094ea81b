
/*
 * weir: nginx module, test hooks (never for production).  config compiles
 * this file only when --with-cc-opt has -DWEIR_TEST_HOOKS=1:
 * "weir_test_clock NOW PEER" takes the time (ns) and the client address
 * from request variables, $weir_test_verdict shows the last policy verdict.
 */


#include "ngx_http_weir_module.h"


/* the injected time, when the request carries one */

ngx_int_t
ngx_http_weir_test_now(ngx_http_request_t *r, uint64_t *now)
{
    u_char                     *p, *last;
    ngx_str_t                   s;
    ngx_http_weir_state_t      *st;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    if (wmcf->test_now == NULL
        || ngx_http_complex_value(r, wmcf->test_now, &s) != NGX_OK
        || s.len == 0)
    {
        return NGX_DECLINED;
    }

    *now = 0;
    last = s.data + s.len;

    for (p = s.data; p < last && *p >= '0' && *p <= '9'; p++) {
        *now = *now * 10 + (*p - '0');
    }

    st = ngx_http_weir_state(r, 0);

    if (st) {
        /* for the cleanup, which cannot evaluate variables */
        st->test_clock = 1;
        st->test_now = *now;
    }

    return NGX_OK;
}


/* injected time does not pass: a delay is not waited out */

ngx_uint_t
ngx_http_weir_test_frozen(ngx_http_request_t *r)
{
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    return wmcf->test_now != NULL;
}


/* the injected client address, when the request carries one */

void
ngx_http_weir_test_peer(ngx_http_request_t *r, weir_request *wr)
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
        wr->peer_ip_len = 0;
    }
}


/* the last policy verdict, as weir_verdict_text() writes it */

ngx_int_t
ngx_http_weir_test_verdict_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_weir_state_t  *st;

    st = ngx_http_weir_state(r, 0);

    if (st == NULL || !st->evaluated) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->data = ngx_pnalloc(r->pool, 1024);
    if (v->data == NULL) {
        return NGX_ERROR;
    }

    if (st->bad_target) {
        v->len = ngx_sprintf(v->data, "action=bad_request") - v->data;

    } else {
        v->len = weir_verdict_text(st->engine, &st->verdict, v->data, 1024);
    }

    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


char *
ngx_http_weir_test_clock(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_main_conf_t  *wmcf = conf;

    ngx_str_t                         *value;
    ngx_uint_t                         i;
    ngx_http_complex_value_t          *cv;
    ngx_http_compile_complex_value_t   ccv;

    value = cf->args->elts;

    cv = ngx_pcalloc(cf->pool, 2 * sizeof(ngx_http_complex_value_t));
    if (cv == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < 2; i++) {
        ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));
        ccv.cf = cf;
        ccv.value = &value[i + 1];
        ccv.complex_value = &cv[i];

        if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    wmcf->test_now = &cv[0];
    wmcf->test_peer = &cv[1];

    ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                       "weir test hooks are enabled: clients can set the "
                       "time and their address; never use this build in "
                       "production");

    return NGX_CONF_OK;
}


/*
 * weir: nginx module, weir_status: the counters of the policy's engine and
 * of the directives' as Prometheus text, or as the JSON status (?format=json);
 * a request with a "key" argument is a key operation (ngx_http_weir_keys.c).
 */


#include "ngx_http_weir_module.h"


static ngx_int_t
ngx_http_weir_status_handler(ngx_http_request_t *r)
{
    int                         wrc, format;
    size_t                      len, cap, need;
    u_char                      dummy[1];
    ngx_int_t                   rc;
    ngx_str_t                   arg;
    ngx_buf_t                  *b;
    ngx_uint_t                  n;
    ngx_chain_t                 out;
    const weir_engine          *engines[2];
    ngx_http_weir_main_conf_t  *wmcf;

    if (ngx_http_weir_is_key_request(r)) {
        return ngx_http_weir_keys_handler(r);
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    format = WEIR_FORMAT_PROMETHEUS;

    if (ngx_http_arg(r, (u_char *) "format", 6, &arg) == NGX_OK) {

        if (arg.len == 4 && ngx_strncmp(arg.data, "json", 4) == 0) {
            format = WEIR_FORMAT_JSON;

        } else if (arg.len != 10
                   || ngx_strncmp(arg.data, "prometheus", 10) != 0)
        {
            return NGX_HTTP_BAD_REQUEST;
        }
    }

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    /* both engines in one text: each metric family once */

    engines[0] = wmcf->pol.engine;
    engines[1] = wmcf->dir.engine;

    /* counters may gain digits between the calls: room to spare, retry */

    b = NULL;
    need = 0;
    wrc = weir_metrics(engines, 2, format, dummy, 0, &need);

    for (n = 0; n < 3 && wrc == WEIR_ERR_BUFFER_TOO_SMALL; n++) {
        cap = need + need / 8 + 256;

        b = ngx_create_temp_buf(r->pool, cap);
        if (b == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        wrc = weir_metrics(engines, 2, format, b->last, cap, &need);
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

    if (format == WEIR_FORMAT_JSON) {
        ngx_str_set(&r->headers_out.content_type, "application/json");

    } else {
        ngx_str_set(&r->headers_out.content_type,
                    "text/plain; version=0.0.4; charset=utf-8");
    }

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


char *
ngx_http_weir_status_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;
    ngx_http_weir_loc_conf_t  *wlcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_weir_status_handler;

    wlcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_weir_module);
    wlcf->status = 1;

    return NGX_CONF_OK;
}


/*
 * a limit_except block inside a weir_status location (the access rules of
 * key operations) answers with weir_status too, as proxy_pass does
 */

void
ngx_http_weir_status_merge(ngx_conf_t *cf, ngx_http_weir_loc_conf_t *prev,
    ngx_http_weir_loc_conf_t *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (prev->status && clcf->lmt_excpt && clcf->handler == NULL) {
        conf->status = 1;
        clcf->handler = ngx_http_weir_status_handler;
    }
}

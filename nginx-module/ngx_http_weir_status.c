
/*
 * weir: nginx module, weir_status: the counters of the policy's engine and
 * of the directives' as Prometheus text, or as the JSON status (?format=json),
 * or the status page that reads it (?format=html, with the engine's headers);
 * a request with a "key" argument is a key operation (ngx_http_weir_keys.c).
 */


#include "ngx_http_weir_module.h"


ngx_str_t  ngx_http_weir_json_type = ngx_string("application/json");

static ngx_str_t  ngx_http_weir_prometheus_type =
    ngx_string("text/plain; version=0.0.4; charset=utf-8");

static ngx_str_t  ngx_http_weir_html_type =
    ngx_string("text/html; charset=utf-8");


static ngx_int_t ngx_http_weir_page_headers(ngx_http_request_t *r);


static ngx_int_t
ngx_http_weir_status_handler(ngx_http_request_t *r)
{
    int                         wrc, format;
    size_t                      cap, need;
    u_char                      dummy[1];
    ngx_int_t                   rc;
    ngx_str_t                   arg;
    ngx_buf_t                  *b;
    ngx_uint_t                  n;
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

        } else if (arg.len == 4 && ngx_strncmp(arg.data, "html", 4) == 0) {
            format = WEIR_FORMAT_HTML;

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

    if (format == WEIR_FORMAT_HTML) {
        if (ngx_http_weir_page_headers(r) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_weir_status_send(r, NGX_HTTP_OK, b,
                                         &ngx_http_weir_html_type);
    }

    return ngx_http_weir_status_send(r, NGX_HTTP_OK, b,
                                     (format == WEIR_FORMAT_JSON)
                                     ? &ngx_http_weir_json_type
                                     : &ngx_http_weir_prometheus_type);
}


/* the page's headers: its Content-Security-Policy, no framing, no caching */

static ngx_int_t
ngx_http_weir_page_headers(ngx_http_request_t *r)
{
    size_t            i;
    const char       *name, *value;
    ngx_table_elt_t  *h;

    for (i = 0; weir_page_header(i, &name, &value) == WEIR_OK; i++) {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
#if (nginx_version >= 1023000)
        h->next = NULL;
#endif
        h->key.data = (u_char *) name;
        h->key.len = ngx_strlen(name);
        h->value.data = (u_char *) value;
        h->value.len = ngx_strlen(value);
    }

    return NGX_OK;
}


/* sends b (the whole body) with status and type; HEAD gets the header only */

ngx_int_t
ngx_http_weir_status_send(ngx_http_request_t *r, ngx_uint_t status,
    ngx_buf_t *b, ngx_str_t *type)
{
    size_t        len;
    ngx_int_t     rc;
    ngx_chain_t   out;

    len = b->last - b->pos;

    r->headers_out.status = status;
    r->headers_out.content_length_n = len;
    r->headers_out.content_type = *type;
    r->headers_out.content_type_len = type->len;

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


/* weir_status [write=on|off]: key changes (POST) only with write=on */

char *
ngx_http_weir_status_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_str_t                 *value;
    ngx_http_core_loc_conf_t  *clcf;
    ngx_http_weir_loc_conf_t  *wlcf;

    wlcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_weir_module);

    if (wlcf->status) {
        return "is duplicate";
    }

    if (cf->args->nelts == 2) {
        value = cf->args->elts;

        if (value[1].len == 8
            && ngx_strncmp(value[1].data, "write=on", 8) == 0)
        {
            wlcf->status_write = 1;

        } else if (value[1].len != 9
                   || ngx_strncmp(value[1].data, "write=off", 9) != 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\" of weir_status; "
                               "expected write=on or write=off", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_weir_status_handler;

    wlcf->status = 1;

    return NGX_CONF_OK;
}


/*
 * a limit_except block inside a weir_status location (the access rules of
 * key operations) answers with weir_status too, as proxy_pass does, with
 * the location's write flag
 */

void
ngx_http_weir_status_merge(ngx_conf_t *cf, ngx_http_weir_loc_conf_t *prev,
    ngx_http_weir_loc_conf_t *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (prev->status && clcf->lmt_excpt && clcf->handler == NULL) {
        conf->status = 1;
        conf->status_write = prev->status_write;
        clcf->handler = ngx_http_weir_status_handler;
    }
}

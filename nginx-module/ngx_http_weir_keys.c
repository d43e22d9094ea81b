
/*
 * weir: nginx module, key operations on weir_status: a request with a "key"
 * argument inspects (GET, HEAD), resets or unbans (POST) one key of a limit
 * (docs/METRICS.md, "Key operations").  The engine parses the query, decides
 * whether a change may go on (only with "weir_status write=on", and never
 * for a request a browser may have sent from another site), answers the JSON
 * and renders the audit line; this file passes the method, the raw query,
 * the location's write flag and the request's headers, logs the line and
 * sends the answer.
 */


#include "ngx_http_weir_module.h"


ngx_int_t
ngx_http_weir_is_key_request(ngx_http_request_t *r)
{
    return weir_key_query(r->args.data, r->args.len) == 1;
}


ngx_int_t
ngx_http_weir_keys_handler(ngx_http_request_t *r)
{
    int                         wrc;
    size_t                      len;
    uint16_t                    status;
    ngx_int_t                   rc;
    ngx_buf_t                  *b;
    weir_request                wr;
    weir_log_line               audit;
    weir_key_access             access;
    const weir_engine          *engines[2];
    ngx_http_weir_loc_conf_t   *wlcf;
    ngx_http_weir_main_conf_t  *wmcf;
    static ngx_uint_t           levels[] = {
        NGX_LOG_INFO, NGX_LOG_NOTICE, NGX_LOG_WARN, NGX_LOG_ERR
    };

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);
    wlcf = ngx_http_get_module_loc_conf(r, ngx_http_weir_module);

    /* the request's headers through the engine's header lookup */

    ngx_http_weir_request(r, &wr);

    access.write = wlcf->status_write ? 1 : 0;
    access.header = wr.header;
    access.header_ctx = wr.header_ctx;

    /* the first engine with a limit of that name is acted on */

    engines[0] = wmcf->pol.engine;
    engines[1] = wmcf->dir.engine;

    b = ngx_create_temp_buf(r->pool, WEIR_KEY_ANSWER_MAX);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = 0;
    status = 0;
    audit.len = 0;

    wrc = weir_key_request(engines, 2, r->method_name.data,
                           r->method_name.len, r->args.data, r->args.len,
                           &access, weir_now_ns(), b->last,
                           WEIR_KEY_ANSWER_MAX, &len, &status, &audit);

    if (wrc != WEIR_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (audit.len > 0) {
        ngx_log_error(levels[audit.level & 3], r->connection->log, 0,
                      "%*s", audit.len, audit.text);
    }

    b->last += len;

    return ngx_http_weir_status_send(r, status, b, &ngx_http_weir_json_type);
}

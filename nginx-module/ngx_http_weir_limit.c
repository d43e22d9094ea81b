
/*
 * weir: nginx module, weir_req and weir_conn at request time: the engine
 * evaluates the location's limits and says what to log (the lines of
 * limit_req and limit_conn) and do; the module delays, rejects or holds the
 * permits; and the variables $weir_req_status and $weir_conn_status.
 */


#include "ngx_http_weir_module.h"


#define NGX_HTTP_WEIR_ASKED  4

/*
 * the keys the engine asked for while evaluating a request (the first few):
 * $weir_key keeps the deciding zone's without evaluating it again
 */

typedef struct {
    ngx_http_request_t         *request;
    ngx_uint_t                  n;
    ngx_http_weir_dzone_t      *zone[NGX_HTTP_WEIR_ASKED];
    ngx_str_t                   key[NGX_HTTP_WEIR_ASKED];
} ngx_http_weir_asked_t;


static int ngx_http_weir_var(void *ctx, size_t index, const uint8_t **value,
    size_t *value_len);
static int ngx_http_weir_var_asked(void *ctx, size_t index,
    const uint8_t **value, size_t *value_len);
static ngx_int_t ngx_http_weir_evaluate(ngx_http_request_t *r,
    ngx_http_weir_sel_t *sel, weir_verdict *v, ngx_http_weir_asked_t *asked);
static void ngx_http_weir_keep_key(ngx_http_request_t *r,
    ngx_http_weir_state_t *st, ngx_http_weir_asked_t *asked);
static ngx_uint_t ngx_http_weir_learned(ngx_http_weir_loc_conf_t *wlcf,
    weir_verdict *v);


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

    ngx_str_t                   key;
    ngx_http_weir_dzone_t      *dz;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    if (index >= wmcf->dzones.nelts || wmcf->vars[index] == NULL) {
        return 0;
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


/* ngx_http_weir_var, remembering the key (ctx: ngx_http_weir_asked_t) */

static int
ngx_http_weir_var_asked(void *ctx, size_t index, const uint8_t **value,
    size_t *value_len)
{
    ngx_http_weir_asked_t  *asked = ctx;

    ngx_http_weir_main_conf_t  *wmcf;

    if (!ngx_http_weir_var(asked->request, index, value, value_len)) {
        return 0;
    }

    if (asked->n < NGX_HTTP_WEIR_ASKED) {
        wmcf = ngx_http_get_module_main_conf(asked->request,
                                             ngx_http_weir_module);
        asked->zone[asked->n] = wmcf->vars[index];
        asked->key[asked->n].data = (u_char *) *value;
        asked->key[asked->n].len = *value_len;
        asked->n++;
    }

    return 1;
}


/* the request as the directives' engine sees it: their zones' keys */

void
ngx_http_weir_limit_request(ngx_http_request_t *r, weir_request *wr)
{
    ngx_memzero(wr, sizeof(weir_request));

    wr->header_ctx = r;
    wr->var = ngx_http_weir_var;
}


/* NGX_OK with the verdict, NGX_DECLINED when no limit applies */

static ngx_int_t
ngx_http_weir_evaluate(ngx_http_request_t *r, ngx_http_weir_sel_t *sel,
    weir_verdict *v, ngx_http_weir_asked_t *asked)
{
    int                          wrc;
    weir_request                 wr;
    ngx_http_weir_main_conf_t   *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    ngx_http_weir_limit_request(r, &wr);

    asked->request = r;
    asked->n = 0;
    wr.header_ctx = asked;
    wr.var = ngx_http_weir_var_asked;

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


ngx_int_t
ngx_http_weir_limit(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st, ngx_uint_t conn)
{
    ngx_str_t                   *status;
    weir_verdict                 req, *v;
    weir_outcome                 o;
    ngx_http_weir_asked_t        asked;
    ngx_http_weir_main_conf_t   *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    v = conn ? &st->conn_verdict : &req;

    if (ngx_http_weir_evaluate(r, conn ? &wlcf->conn_sel : &wlcf->req_sel, v,
                               &asked)
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    if (conn) {
        /* the permits, released when the request ends */
        st->conn_engine = wmcf->dir.engine;
        st->conn_admitted = ngx_http_weir_now(r);
        st->conn_learned = ngx_http_weir_learned(wlcf, v);
    }

    if (weir_engine_outcome(wmcf->dir.engine, v,
                            conn ? WEIR_STYLE_CONN : WEIR_STYLE_REQ, &o)
        != WEIR_OK)
    {
        return NGX_DECLINED;
    }

    if (ngx_http_weir_log_record(st, wmcf->dir.engine, &o.log,
                                 conn ? WEIR_STYLE_CONN : WEIR_STYLE_REQ)
        == NGX_OK
        && st->log_limit >= 0)
    {
        ngx_http_weir_keep_key(r, st, &asked);
    }

    status = conn ? &st->conn_status : &st->req_status;
    status->data = (u_char *) o.state;
    status->len = o.state_len;

    return ngx_http_weir_act(r, &o,
                             conn ? wlcf->conn_log_level : wlcf->req_log_level,
                             wlcf->req_delay_log_level);
}


/*
 * The permits of v (a bit for each) that "weir_conn ZONE auto" lines hold:
 * a zone that learns its number measures the backend, and its permits go
 * back with the response's last buffer (ngx_http_weir_release.c); a number
 * keeps limit_conn's meaning, until the request is freed
 */

static ngx_uint_t
ngx_http_weir_learned(ngx_http_weir_loc_conf_t *wlcf, weir_verdict *v)
{
    ngx_uint_t               i, j, learned;
    ngx_http_weir_limit_t  **lim;

    /* conn_sel.index[i] is the engine limit of conn_limits[i] */

    lim = wlcf->conn_limits->elts;
    learned = 0;

    for (i = 0; i < wlcf->conn_sel.n; i++) {
        if (lim[i]->spec.max != 0) {
            continue;
        }

        for (j = 0; j < WEIR_MAX_PERMITS; j++) {
            if (v->permits[j].limit == wlcf->conn_sel.index[i]) {
                learned |= (ngx_uint_t) 1 << j;
            }
        }
    }

    return learned;
}


/*
 * Keeps the key of the zone that decided (delayed, rejected, or would have
 * in a dry run) as the request had it when it was evaluated (the engine
 * asked for it then, and the value lives in the request's pool): $weir_key
 * shows it after internal redirects (error_page, try_files) changed the
 * variables it is made of.  Passes keep nothing.
 */

static void
ngx_http_weir_keep_key(ngx_http_request_t *r, ngx_http_weir_state_t *st,
    ngx_http_weir_asked_t *asked)
{
    ngx_uint_t                  i, k;
    ngx_http_weir_dzone_t      *dz;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);
    dz = wmcf->dzones.elts;

    for (i = 0; i < wmcf->dzones.nelts; i++) {
        if (dz[i].name.len == st->log_name.len
            && ngx_strncmp(dz[i].name.data, st->log_name.data,
                           st->log_name.len)
               == 0)
        {
            for (k = 0; k < asked->n; k++) {
                if (asked->zone[k] == &dz[i]) {
                    st->log_key = asked->key[k];
                    return;
                }
            }

            if (ngx_http_complex_value(r, &dz[i].key, &st->log_key)
                != NGX_OK)
            {
                ngx_str_null(&st->log_key);
            }

            return;
        }
    }
}


/* $weir_req_status and $weir_conn_status: data is the state's field */

ngx_int_t
ngx_http_weir_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t              *status;
    ngx_http_weir_state_t  *st;

    st = ngx_http_weir_state(r, 0);
    status = (st == NULL) ? NULL : (ngx_str_t *) ((u_char *) st + data);

    if (status == NULL || status->len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = status->len;
    v->data = status->data;

    return NGX_OK;
}

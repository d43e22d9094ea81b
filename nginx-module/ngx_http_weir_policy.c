
/*
 * weir: nginx module, policy mode.  weir_policy loads a policy and declares
 * its zones; "weir on" hands each request to the engine through a request
 * view, acts on the verdict (pass, delay, queue, reject), adds the engine's
 * response headers and charges the charge_on_status limits once the response
 * header is sent; ngx_http_weir_release.c gives the permits back.
 */


#include "ngx_http_weir_module.h"


static ngx_int_t ngx_http_weir_verdict(ngx_http_request_t *r,
    ngx_http_weir_loc_conf_t *wlcf, ngx_http_weir_state_t *st, int wrc,
    u_char *buf);
static void ngx_http_weir_queue_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_weir_charge_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_weir_filter_init(ngx_conf_t *cf);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;


/* a module of its own, to take its place among the filters (see config) */

static ngx_http_module_t  ngx_http_weir_filter_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_weir_filter_init,             /* postconfiguration */

    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    NULL,                                  /* create location configuration */
    NULL                                   /* merge location configuration */
};


ngx_module_t  ngx_http_weir_filter_module = {
    NGX_MODULE_V1,
    &ngx_http_weir_filter_module_ctx,      /* module context */
    NULL,                                  /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


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


void
ngx_http_weir_request(ngx_http_request_t *r, weir_request *wr)
{
    ngx_http_request_t   *m;
    struct sockaddr_in   *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6  *sin6;
#endif

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

    /* the same address in binary: the engine need not parse the text */

    switch (m->connection->sockaddr->sa_family) {

    case AF_INET:
        sin = (struct sockaddr_in *) m->connection->sockaddr;
        ngx_memcpy(wr->peer_ip, &sin->sin_addr, 4);
        wr->peer_ip_len = 4;
        break;

#if (NGX_HAVE_INET6)
    case AF_INET6:
        sin6 = (struct sockaddr_in6 *) m->connection->sockaddr;
        ngx_memcpy(wr->peer_ip, &sin6->sin6_addr, 16);
        wr->peer_ip_len = 16;
        break;
#endif

    default: /* a unix-domain socket: its text says so */
        break;
    }

#if (WEIR_TEST_HOOKS)
    ngx_http_weir_test_peer(r, wr);
#endif

    ngx_http_weir_header_cursor.r = NULL;

    wr->header = ngx_http_weir_header_lookup;
    wr->header_ctx = m;
}


/* adds the verdict's headers to the response */

static ngx_int_t
ngx_http_weir_add_headers(ngx_http_request_t *r, u_char *buf, size_t len,
    ngx_flag_t ratelimit)
{
    size_t            pos;
    ngx_str_t         key, value;
    ngx_table_elt_t  *h;

    pos = 0;

    /* ngx_str_t and weir_arg share their layout: length, then bytes */

    while (weir_header_next(buf, len, &pos, ratelimit, (weir_arg *) &key,
                            (weir_arg *) &value))
    {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_ERROR;
        }

        h->hash = 1;
        h->key = key;
        h->value = value;
#if (nginx_version >= 1023000)
        h->next = NULL;
#endif
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_weir_verdict(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st, int wrc, u_char *buf)
{
    ngx_int_t      rc;
    weir_outcome   o;
    weir_verdict  *v;

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
        != NGX_OK
        || weir_engine_outcome(st->engine, v, WEIR_STYLE_POLICY, &o) != WEIR_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_weir_log_record(st, st->engine, &o.log, WEIR_STYLE_POLICY);

    if (o.action != WEIR_QUEUE) {
        st->policy_done = 1;

    } else if (st->queued) {
        /* logged when the request joined the queue */
        o.lines--;

    } else {
        st->queued = 1;
    }

#if (WEIR_TEST_HOOKS)
    if (o.action == WEIR_DELAY && ngx_http_weir_test_frozen(r)) {
        /* injected time does not pass while waiting */
        o.action = WEIR_PASS;
    }
#endif

    rc = ngx_http_weir_act(r, &o, NGX_LOG_ERR, NGX_LOG_WARN);

    if (o.action == WEIR_QUEUE) {
        /* weir says when to ask again, and ends the wait at the timeout */
        return ngx_http_weir_wait(r, o.wait_ms, ngx_http_weir_queue_handler);
    }

    return rc;
}


/* evaluates the request, or asks again for a queued one */

ngx_int_t
ngx_http_weir_policy(ngx_http_request_t *r, ngx_http_weir_loc_conf_t *wlcf,
    ngx_http_weir_state_t *st)
{
    int                          wrc;
    u_char                      *buf;
    uint64_t                     now;
    ngx_int_t                    rc;
    weir_request                 wr;
    ngx_http_weir_main_conf_t   *wmcf;

    buf = ngx_pnalloc(r->pool, NGX_HTTP_WEIR_HEADER_BUF);
    if (buf == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_weir_request(r, &wr);
    now = ngx_http_weir_now(r);

    if (!st->queued) {
        wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

        st->engine = wmcf->pol.engine;
        st->evaluated = 1;

        wrc = weir_engine_evaluate(st->engine, &wr, now, &st->verdict, buf,
                                   NGX_HTTP_WEIR_HEADER_BUF);

    } else {
        wrc = weir_engine_evaluate_queued(st->engine, &wr, now, &st->verdict,
                                          buf, NGX_HTTP_WEIR_HEADER_BUF);
    }

    rc = ngx_http_weir_verdict(r, wlcf, st, wrc, buf);

    /* a queued request is woken when this worker gives permits back */

    ngx_http_weir_queue_wait(r, st, rc == NGX_AGAIN
                                    && st->verdict.action == WEIR_QUEUE, now);

    /* its backend's time starts when it is let through (after its delay) */

    if (wrc == WEIR_OK && st->verdict.action == WEIR_PASS) {
        st->admitted = now;

    } else if (wrc == WEIR_OK && st->verdict.action == WEIR_DELAY) {
        st->admitted = now + st->verdict.wait_ns;
    }

    return rc;
}


static void
ngx_http_weir_queue_handler(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    ngx_http_weir_state_t     *st;
    ngx_http_weir_loc_conf_t  *wlcf;

    if (ngx_http_weir_waiting(r)) {
        return;
    }

    st = ngx_http_weir_state(r, 0);
    wlcf = ngx_http_get_module_loc_conf(r, ngx_http_weir_module);

    rc = st ? ngx_http_weir_policy(r, wlcf, st)
            : NGX_HTTP_INTERNAL_SERVER_ERROR;

    if (rc == NGX_AGAIN) {
        return;
    }

    if (rc != NGX_DECLINED) {
        ngx_http_finalize_request(r, rc);
        return;
    }

    ngx_http_weir_resume(r);
}


/*
 * Charges the request's charge_on_status limits with the status of the
 * response header once it went down the filter chain: the status the client
 * gets, final after error_page and the other filters.  The charge does not
 * wait for the body (a client's HTTP/2 flow control can hold a stream for
 * send_timeout).  The engine clears the charges it takes, so the one the
 * request's end makes (ngx_http_weir_cleanup) charges only a request whose
 * header was never sent: a client that left (499), a failed upstream.
 * Subrequests' headers are not the response's: they charge nothing.
 */

static ngx_int_t
ngx_http_weir_charge_filter(ngx_http_request_t *r)
{
    ngx_int_t               rc;
    ngx_uint_t              status;
    ngx_http_weir_state_t  *st;

    rc = ngx_http_next_header_filter(r);

    if (r != r->main || !r->header_sent) {
        return rc;
    }

    st = ngx_http_weir_state(r, 0);
    status = r->headers_out.status;

    if (st == NULL || !st->evaluated || status == 0 || status > 999
        || st->verdict.charges[0].limit < 0)
    {
        /* nothing deferred (the used charges come first) */
        return rc;
    }

    (void) weir_engine_charge(st->engine, &st->verdict, (uint16_t) status,
                              st->test_clock ? st->test_now : weir_now_ns());

    return rc;
}


/*
 * in policy mode (weir_policy): the header filter that charges; with any
 * engine, the body filter that gives permits back (ngx_http_weir_release.c)
 */

static ngx_int_t
ngx_http_weir_filter_init(ngx_conf_t *cf)
{
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

    if (wmcf->pol.policy) {
        ngx_http_next_header_filter = ngx_http_top_header_filter;
        ngx_http_top_header_filter = ngx_http_weir_charge_filter;
    }

    return ngx_http_weir_release_init(cf);
}


char *
ngx_http_weir_policy_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_weir_main_conf_t  *wmcf = conf;

    u_char                 *p;
    ngx_str_t              *value;
    weir_error             *err;

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
                         &wmcf->pol.policy, &err)
        != WEIR_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "weir policy: %s",
                           weir_error_message(err));
        weir_error_free(err);
        return NGX_CONF_ERROR;
    }

    /* for errors: "weir policy "FILE"" and " in nginx.conf:LINE" */

    p = ngx_pnalloc(cf->pool, wmcf->policy_file.len
                              + cf->conf_file->file.name.len
                              + NGX_INT_T_LEN + 32);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    wmcf->pol.what.data = p;
    p = ngx_sprintf(p, "weir policy \"%V\"", &wmcf->policy_file);
    wmcf->pol.what.len = p - wmcf->pol.what.data;

    wmcf->pol.where.data = p;
    wmcf->pol.where.len = ngx_sprintf(p, " in %V:%ui",
                                      &cf->conf_file->file.name,
                                      cf->conf_file->line) - p;

    if (ngx_http_weir_add_zones(cf, &wmcf->pol, "weir") != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}

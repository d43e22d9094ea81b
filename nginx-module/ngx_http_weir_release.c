
/*
 * weir: nginx module, when the permits go back.
 *
 * A policy's concurrency permits, and those of "weir_conn ZONE auto",
 * measure the backend: they go back when the backend is done with the
 * request, that is when the response's last buffer leaves the content
 * handler (the body filter here sees it pass; with proxy_buffering, once the
 * upstream's response is read in full, however long the client takes to
 * read it), or when the request is freed if that comes first.  The permits
 * of "weir_conn ZONE NUMBER" keep limit_conn's meaning: they go back when
 * the request is freed.  All give weir the backend's time for the request
 * (weir_engine_release_sampled), which teaches the limits that learn their
 * number and feeds the latency figures.
 *
 * A permit going back frees a slot that requests queued by the same limit
 * and key wait for: one of this worker's waiters in that queue is woken at
 * once, the oldest while the queue moves and the newest once it stands (the
 * engine decides: weir_engine_queue_lifo).  A woken waiter that leaves
 * without the slot (refused, or its client gone) wakes the next.  Waiters in
 * other workers find the slot when they next ask (the engine's poll
 * interval, 10 ms).
 */


#include "ngx_http_weir_module.h"


static ngx_int_t ngx_http_weir_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static void ngx_http_weir_release_conn(ngx_http_weir_state_t *st,
    ngx_uint_t end, uint16_t status, uint64_t done, uint64_t now);
static uint64_t ngx_http_weir_latency(ngx_http_request_t *r,
    uint64_t admitted, uint64_t now);
static void ngx_http_weir_wake(ngx_http_request_t *r, int32_t limit,
    uint64_t key, uint64_t now);
static ngx_http_weir_state_t *ngx_http_weir_waiter(ngx_queue_t *waiters,
    int32_t limit, uint64_t key, ngx_uint_t newest);


#define NGX_HTTP_WEIR_MS  1000000


static ngx_http_output_body_filter_pt  ngx_http_next_body_filter;


/* a response's last buffer passes: the backend is done with the request */

static ngx_int_t
ngx_http_weir_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_int_t               rc;
    ngx_uint_t              last;
    ngx_chain_t            *cl;
    ngx_http_weir_state_t  *st;

    last = 0;

    if (r == r->main) {
        for (cl = in; cl; cl = cl->next) {
            if (cl->buf->last_buf) {
                last = 1;
                break;
            }
        }
    }

    rc = ngx_http_next_body_filter(r, in);

    if (last) {
        st = ngx_http_weir_state(r, 0);

        if (st && !st->ended) {
            ngx_http_weir_release(st, 0);
        }
    }

    return rc;
}


/*
 * Gives the request's permits back: at the end of its response (end 0),
 * the policy's and those of weir_conn's learning zones; when it is freed
 * (end 1), all that are left, and a queue place it still holds.  The status first charges the policy's
 * charge_on_status limits, before the permits go back (a concurrency limit
 * on the same key then bounds the requests that pass before their charge
 * lands); after a sent header charged them (ngx_http_weir_charge_filter)
 * the verdict holds none, and this charges nothing.  The engine clears what
 * it releases: a second release changes nothing.
 */

void
ngx_http_weir_release(ngx_http_weir_state_t *st, ngx_uint_t end)
{
    uint64_t             now, done, latency;
    int32_t              limits[WEIR_MAX_PERMITS];
    uint64_t             keys[WEIR_MAX_PERMITS];
    uint16_t             status;
    ngx_uint_t           i, n;
    ngx_http_request_t  *r;

    if (st->conn_engine == NULL
        && (!st->evaluated
            || (st->verdict.permits[0].limit < 0
                && st->verdict.charges[0].limit < 0
                && st->verdict.action != WEIR_QUEUE && !st->waiting)))
    {
        /*
         * nothing held, queued or to charge (the used permits and charges
         * come first): most requests
         */
        st->ended = 1;
        return;
    }

    r = st->request;

    now = st->test_clock ? st->test_now : weir_now_ns();

    if (!st->ended) {
        st->ended = 1;
        st->done = now;
    }

    /* when the response ended, or now if it never did */
    done = st->done;

    /* 0: none, for a status weir cannot hold */
    status = (r->headers_out.status <= 999)
             ? (uint16_t) r->headers_out.status : 0;

    if (st->conn_engine && (end || st->conn_learned)) {
        ngx_http_weir_release_conn(st, end, status, done, now);
    }

    if (!st->evaluated) {
        return;
    }

    if (end) {
        if (st->verdict.action == WEIR_QUEUE) {
            (void) weir_engine_abandon(st->engine, &st->verdict, now);
        }

        ngx_http_weir_queue_wait(r, st, 0, now);
    }

    (void) weir_engine_charge(st->engine, &st->verdict, status, now);

    n = 0;

    for (i = 0; i < WEIR_MAX_PERMITS; i++) {
        if (st->verdict.permits[i].limit >= 0) {
            limits[n] = st->verdict.permits[i].limit;
            keys[n++] = st->verdict.permits[i].key_hash;
        }
    }

    if (n == 0) {
        return;
    }

    latency = ngx_http_weir_latency(r, st->admitted, done);

    (void) weir_engine_release_sampled(st->engine, &st->verdict, latency,
                                       status, now);

    for (i = 0; i < n; i++) {
        ngx_http_weir_wake(r, limits[i], keys[i], now);
    }
}


/*
 * weir_conn's permits: those of zones that learn their number ("auto") at
 * the end of the response, as a policy's; the others when the request is
 * freed (end 1), as limit_conn's
 */

static void
ngx_http_weir_release_conn(ngx_http_weir_state_t *st, ngx_uint_t end,
    uint16_t status, uint64_t done, uint64_t now)
{
    uint64_t      latency;
    ngx_uint_t    i;
    weir_verdict  learned;

    latency = ngx_http_weir_latency(st->request, st->conn_admitted, done);

    if (st->conn_learned) {
        learned = st->conn_verdict;

        for (i = 0; i < WEIR_MAX_PERMITS; i++) {
            if (st->conn_learned & ((ngx_uint_t) 1 << i)) {
                st->conn_verdict.permits[i].limit = -1;

            } else {
                learned.permits[i].limit = -1;
            }
        }

        st->conn_learned = 0;

        (void) weir_engine_release_sampled(st->conn_engine, &learned, latency,
                                           status, now);
    }

    if (end) {
        (void) weir_engine_release_sampled(st->conn_engine, &st->conn_verdict,
                                           latency, status, now);
    }
}


/*
 * The backend's time for the request, ns (0: unknown).  For a proxied
 * request, the sum over its upstream attempts of $upstream_response_time
 * (to the response's last byte); for a response nginx did not buffer
 * (proxy_buffering off, "X-Accel-Buffering: no") or an upgraded connection,
 * of $upstream_header_time (to the response header) instead: such a
 * response lasts as long as its stream, which says nothing of the backend's
 * load.  nginx counts these in milliseconds; an upstream that answered
 * within one is given the time since admission, up to one.  For any other
 * request, the time from admission to the end of its response.
 */

static uint64_t
ngx_http_weir_latency(ngx_http_request_t *r, uint64_t admitted, uint64_t now)
{
    uint64_t                    ns, sum;
    ngx_uint_t                  i, header;
    ngx_msec_t                  ms;
    ngx_http_upstream_state_t  *state;

    ns = (admitted && now > admitted) ? now - admitted : 0;

    if (r->upstream_states == NULL || r->upstream_states->nelts == 0) {
        return ns;
    }

    header = r->upstream && (!r->upstream->buffering || r->upstream->upgrade);

    state = r->upstream_states->elts;
    sum = 0;

    for (i = 0; i < r->upstream_states->nelts; i++) {
        ms = state[i].response_time;

        if (header && state[i].header_time != (ngx_msec_t) -1) {
            ms = state[i].header_time;
        }

        if (ms != (ngx_msec_t) -1) {
            sum += ms;
        }
    }

    if (sum == 0) {
        return ngx_max(ngx_min(ns, NGX_HTTP_WEIR_MS), 1);
    }

    return sum * NGX_HTTP_WEIR_MS;
}


/*
 * Keeps the request among this worker's waiters of the policy's engine
 * while its verdict queues it (wait 1), in the order they joined, and takes
 * it out once it does not (wait 0).  A waiter woken for a slot that leaves
 * without it (refused, or its client gone) wakes the next in its queue.
 */

void
ngx_http_weir_queue_wait(ngx_http_request_t *r, ngx_http_weir_state_t *st,
    ngx_uint_t wait, uint64_t now)
{
    ngx_http_weir_main_conf_t  *wmcf;

    if (wait) {
        st->queue_limit = st->verdict.ticket.limit;
        st->queue_key = weir_ticket_queue_key(&st->verdict.ticket);
        st->woken = 0;

        if (!st->waiting) {
            wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

            ngx_queue_insert_tail(&wmcf->pol.waiters, &st->waiter);
            st->waiting = 1;
        }

        return;
    }

    if (!st->waiting) {
        return;
    }

    ngx_queue_remove(&st->waiter);
    st->waiting = 0;

    if (st->woken && st->verdict.action != WEIR_PASS
        && st->verdict.action != WEIR_DELAY)
    {
        st->woken = 0;
        ngx_http_weir_wake(r, st->queue_limit, st->queue_key, now);
    }
}


/*
 * A permit of this limit and key went back: one of this worker's requests
 * queued for it asks again at once instead of at its next poll, the oldest
 * or, once the queue stands, the newest
 */

static void
ngx_http_weir_wake(ngx_http_request_t *r, int32_t limit, uint64_t key,
    uint64_t now)
{
    ngx_event_t                *wev;
    ngx_http_weir_state_t      *w;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_get_module_main_conf(r, ngx_http_weir_module);

    w = ngx_http_weir_waiter(&wmcf->pol.waiters, limit, key, 0);

    if (w == NULL) {
        return;
    }

    if (weir_engine_queue_lifo(w->engine, &w->verdict.ticket, now) == 1) {
        w = ngx_http_weir_waiter(&wmcf->pol.waiters, limit, key, 1);
    }

    /* as its timer would (ngx_http_request_handler), now */

    wev = w->request->connection->write;

    if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    wev->delayed = 0;
    w->woken = 1;

    ngx_post_event(wev, &ngx_posted_events);
}


/* the oldest (or newest) waiter of this queue not woken yet, or NULL */

static ngx_http_weir_state_t *
ngx_http_weir_waiter(ngx_queue_t *waiters, int32_t limit, uint64_t key,
    ngx_uint_t newest)
{
    ngx_queue_t            *q;
    ngx_http_weir_state_t  *w;

    for (q = newest ? ngx_queue_last(waiters) : ngx_queue_head(waiters);
         q != ngx_queue_sentinel(waiters);
         q = newest ? ngx_queue_prev(q) : ngx_queue_next(q))
    {
        w = ngx_queue_data(q, ngx_http_weir_state_t, waiter);

        if (w->verdict.ticket.limit == limit && w->queue_key == key
            && w->request->connection->write->delayed)
        {
            return w;
        }
    }

    return NULL;
}


/* the body filter, after nginx's own (see config) */

ngx_int_t
ngx_http_weir_release_init(ngx_conf_t *cf)
{
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

    if (wmcf->pol.policy == NULL && wmcf->dir.policy == NULL) {
        return NGX_OK;
    }

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_weir_body_filter;

    return NGX_OK;
}

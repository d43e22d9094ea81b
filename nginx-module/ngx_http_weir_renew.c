/*
 * weir: lease renewal.  A concurrency permit (weir_conn, a policy's
 * concurrency limit) is a lease; each worker renews the leases of the
 * permits it holds from a timer, every quarter of the shortest lease, so a
 * request counts for its whole life.  A worker that dies renews nothing:
 * its permits come back within two leases.  The timer is cancelable, so it
 * never keeps a worker alive at shutdown, and it keeps running while a
 * shutting-down worker finishes its requests.
 */


#include "ngx_http_weir_module.h"


static void ngx_http_weir_renew(ngx_event_t *ev);


static ngx_event_t  ngx_http_weir_renew_ev;
static ngx_msec_t   ngx_http_weir_renew_every;


void
ngx_http_weir_renew_init(ngx_cycle_t *cycle)
{
    uint64_t                    ns, every;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_weir_module);

    if (wmcf == NULL) {
        return;
    }

    ns = weir_engine_renew_interval_ns(wmcf->pol.engine);
    every = weir_engine_renew_interval_ns(wmcf->dir.engine);

    if (ns == 0 || (every != 0 && every < ns)) {
        ns = every;
    }

    if (ns == 0) {
        /* no concurrency limit: nothing to renew */
        return;
    }

    ngx_http_weir_renew_every = (ngx_msec_t) ngx_max(ns / 1000000, 1);

    ngx_http_weir_renew_ev.handler = ngx_http_weir_renew;
    ngx_http_weir_renew_ev.log = cycle->log;
    ngx_http_weir_renew_ev.data = wmcf;
    ngx_http_weir_renew_ev.cancelable = 1;

    ngx_add_timer(&ngx_http_weir_renew_ev, ngx_http_weir_renew_every);
}


static void
ngx_http_weir_renew(ngx_event_t *ev)
{
    uint64_t                    now;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ev->data;
    now = weir_now_ns();

    if (wmcf->pol.engine) {
        (void) weir_engine_renew_held(wmcf->pol.engine, now);
    }

    if (wmcf->dir.engine) {
        (void) weir_engine_renew_held(wmcf->dir.engine, now);
    }

    if (!ngx_terminate) {
        ngx_add_timer(ev, ngx_http_weir_renew_every);
    }
}

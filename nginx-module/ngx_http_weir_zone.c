
/*
 * weir: nginx module, shared memory: the regions of weir's tables inside
 * nginx's zones, the policy zones and their counters (whose init attaches
 * the engine), and the cluster syncers of each worker.
 */


#include "ngx_http_weir_module.h"
#include <pthread.h>


static ngx_int_t ngx_http_weir_init_policy_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static void ngx_http_weir_cluster_log(ngx_event_t *ev);


/*
 * The zone's slab pool keeps its header at the start of the segment; weir's
 * table goes into one page-aligned allocation from it, found again through
 * shpool->data when the segment outlives a reload.
 */

void *
ngx_http_weir_shm_region(ngx_shm_zone_t *shm_zone, ngx_uint_t reuse,
    size_t *len)
{
    size_t            size;
    ngx_slab_pool_t  *shpool;

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if ((reuse || shm_zone->shm.exists) && shpool->data) {
        *len = *(size_t *) shpool->data;
        return (u_char *) shpool->data + ngx_pagesize;
    }

    if (*len == 0) {
        size = shpool->pfree << ngx_pagesize_shift;
        if (size <= ngx_pagesize) {
            return NULL;
        }

        *len = size - ngx_pagesize;
    }

    /* one page in front of the region records its length */

    shpool->data = ngx_slab_alloc(shpool, *len + ngx_pagesize);
    if (shpool->data == NULL) {
        return NULL;
    }

    *(size_t *) shpool->data = *len;

    return (u_char *) shpool->data + ngx_pagesize;
}


static ngx_int_t
ngx_http_weir_init_policy_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_weir_pzone_t  *pz;

    size_t  len;

    pz = shm_zone->data;

    len = pz->bytes;
    pz->region = ngx_http_weir_shm_region(shm_zone, data != NULL, &len);

    if (pz->region == NULL || len != pz->bytes) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "could not place weir policy zone \"%V\" "
                      "(%uz bytes) in shared memory",
                      &shm_zone->shm.name, pz->bytes);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The counters zone is the last weir zone nginx initializes: by then every
 * policy zone has its region, and the engine is attached here, in the
 * master, before the workers fork.  A failure here fails the reload (the
 * running configuration stays), unlike one in the init module handler,
 * which is fatal to the master.
 */

ngx_int_t
ngx_http_weir_init_counters_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_int_t                   rc;
    ngx_uint_t                  i, n;
    weir_error                 *err;
    weir_region                *regions, *cluster, counters;
    ngx_http_weir_pzone_t      *cz, **pz;
    ngx_http_weir_main_conf_t  *wmcf;

    if (ngx_http_weir_init_policy_zone(shm_zone, data) != NGX_OK) {
        return NGX_ERROR;
    }

    cz = shm_zone->data;
    wmcf = cz->conf;
    n = wmcf->pzones.nelts;

    regions = ngx_calloc(2 * (n + 1) * sizeof(weir_region), shm_zone->shm.log);
    if (regions == NULL) {
        return NGX_ERROR;
    }

    cluster = regions + n + 1;

    pz = wmcf->pzones.elts;

    for (i = 0; i < n; i++) {
        regions[i].ptr = pz[i]->region;
        regions[i].len = pz[i]->bytes;

        if (pz[i]->cluster) {
            cluster[i].ptr = pz[i]->cluster->region;
            cluster[i].len = pz[i]->cluster->bytes;
        }
    }

    counters.ptr = cz->region;
    counters.len = cz->bytes;

    err = NULL;
    rc = NGX_OK;

    /*
     * the master attaches (and on first start formats) the regions; the
     * cluster syncer threads start in each worker: threads do not survive
     * fork(), and the workers elect one syncer among themselves; a region
     * without a table is fresh slab pages of a new zone, all zero, so only
     * its header is written and a large zone costs nothing until used
     */

    if (weir_engine_attach_shared(wmcf->policy, regions, n, cluster,
                                  &counters, 0,
                                  WEIR_ATTACH_DEFER_SYNC|WEIR_ATTACH_ZEROED,
                                  &wmcf->engine, &err)
        != WEIR_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "weir policy \"%V\": %s in %V", &wmcf->policy_file,
                      weir_error_message(err), &wmcf->policy_conf);
        weir_error_free(err);
        rc = NGX_ERROR;
    }

    ngx_free(regions);

    return rc;
}


/*
 * Adds the shared memory zone of a policy zone, its cluster region or the
 * counters, named "PREFIX:ID", where ID identifies the layout (the zone's
 * schema, the limits' fingerprint): nginx keeps a segment across a reload
 * only for the same name and size, so a changed layout gets fresh memory
 * while the old workers finish with the old one.  The segment holds
 * pz->bytes and spare bytes more (a table's slab overhead).  *prev is the
 * zone of the running configuration when it had another layout, NULL
 * otherwise.
 */

ngx_shm_zone_t *
ngx_http_weir_add_pzone(ngx_conf_t *cf, ngx_http_weir_pzone_t *pz,
    char *prefix, u_char *name, size_t len, uint64_t id, size_t spare,
    ngx_http_weir_pzone_t **prev)
{
    size_t           size;
    ngx_str_t        s;
    ngx_shm_zone_t  *shm_zone, *old;

    s.len = ngx_strlen(prefix) + len + 1 + 16;
    s.data = ngx_pnalloc(cf->pool, s.len);
    if (s.data == NULL) {
        return NULL;
    }

    ngx_sprintf(s.data, "%s%*s:%016xL", prefix, len, name, id);

    /* room for the slab pool's own bookkeeping and the length page */

    size = ngx_align(pz->bytes + spare + 16 * ngx_pagesize, ngx_pagesize);

    shm_zone = ngx_shared_memory_add(cf, &s, size, &ngx_http_weir_module);
    if (shm_zone == NULL) {
        return NULL;
    }

    if (shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate weir zone \"%V\"", &s);
        return NULL;
    }

    shm_zone->init = ngx_http_weir_init_policy_zone;
    shm_zone->data = pz;

    /* the same zone in the running configuration: same name up to the ID */

    *prev = NULL;
    old = ngx_http_weir_old_zone(cf, &s, s.len - 16);

    if (old
        && (ngx_strncmp(old->shm.name.data, s.data, s.len) != 0
            || old->shm.size != shm_zone->shm.size))
    {
        *prev = old->data;
    }

    return shm_zone;
}


/* the running configuration's weir zone whose name starts the same */

ngx_shm_zone_t *
ngx_http_weir_old_zone(ngx_conf_t *cf, ngx_str_t *name, size_t prefix)
{
    ngx_uint_t        i;
    ngx_shm_zone_t   *old;
    ngx_list_part_t  *part;

    part = &cf->cycle->old_cycle->shared_memory.part;
    old = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            old = part->elts;
            i = 0;
        }

        if (old[i].tag == &ngx_http_weir_module
            && old[i].shm.name.len == name->len
            && ngx_strncmp(old[i].shm.name.data, name->data, prefix) == 0)
        {
            return &old[i];
        }
    }
}


/*
 * Cluster zones: each worker runs a syncer thread (one of them, elected
 * through the zone's table, talks to Redis).  The syncers' messages are not
 * logged from their threads, as nginx's logging is not thread-safe: weir
 * queues them and a timer of the worker drains the queue into the error log.
 */

static ngx_event_t  ngx_http_weir_log_ev;
static ngx_uint_t   ngx_http_weir_syncing;


ngx_int_t
ngx_http_weir_init_process(ngx_cycle_t *cycle)
{
    sigset_t                    all, old;
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    weir_error                 *err;
    ngx_http_weir_pzone_t     **pz;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_weir_module);

    if (wmcf == NULL || wmcf->engine == NULL) {
        return NGX_OK;
    }

    pz = wmcf->pzones.elts;

    for (i = 0; i < wmcf->pzones.nelts; i++) {
        if (pz[i]->cluster) {
            break;
        }
    }

    if (i == wmcf->pzones.nelts) {
        return NGX_OK;
    }

    weir_cluster_log_queue();

    /* the syncer threads must not take the worker's signals */

    sigfillset(&all);

    if (pthread_sigmask(SIG_BLOCK, &all, &old) != 0) {
        /* the worker still serves requests, on the fallback share */
        ngx_log_error(NGX_LOG_ALERT, cycle->log, ngx_errno,
                      "pthread_sigmask() failed, no weir cluster syncer");
        return NGX_OK;
    }

    err = NULL;
    rc = weir_engine_start_sync(wmcf->engine, &err);

    (void) pthread_sigmask(SIG_SETMASK, &old, NULL);

    if (rc != WEIR_OK) {
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                      "weir: cannot start the cluster syncers: %s",
                      weir_error_message(err));
        weir_error_free(err);

        /* those that started are stopped at exit and their messages drained */
    }

    ngx_http_weir_syncing = 1;

    ngx_http_weir_log_ev.handler = ngx_http_weir_cluster_log;
    ngx_http_weir_log_ev.log = cycle->log;
    ngx_http_weir_log_ev.data = cycle;
    ngx_http_weir_log_ev.cancelable = 1;

    ngx_add_timer(&ngx_http_weir_log_ev, 200);

    return NGX_OK;
}


void
ngx_http_weir_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_weir_main_conf_t  *wmcf;

    if (!ngx_http_weir_syncing) {
        return;
    }

    wmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_weir_module);

    if (wmcf && wmcf->engine) {
        /* the leader resigns: another worker takes over at once */
        weir_engine_stop_sync(wmcf->engine);
    }

    ngx_http_weir_syncing = 0;

    ngx_http_weir_cluster_log(NULL);
}


static void
ngx_http_weir_cluster_log(ngx_event_t *ev)
{
    size_t  n;
    u_char  buf[512];

    for ( ;; ) {
        n = weir_cluster_log_pop(buf, sizeof(buf));
        if (n == 0) {
            break;
        }

        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0, "weir: %*s", n, buf);
    }

    if (ev && !ngx_exiting && !ngx_quit && !ngx_terminate) {
        ngx_add_timer(ev, 200);
    }
}

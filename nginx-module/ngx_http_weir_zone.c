
/*
 * weir: nginx module, shared memory: the regions of an engine's zones
 * (the policy's or the directives') inside nginx's zones, its counters
 * (whose init attaches the engine), and the cluster syncers of each worker.
 */


#include "ngx_http_weir_module.h"


static ngx_int_t ngx_http_weir_init_policy_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_weir_init_counters_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_shm_zone_t *ngx_http_weir_add_pzone(ngx_conf_t *cf,
    ngx_http_weir_pzone_t *pz, u_char *prefix, u_char *name, size_t len,
    uint64_t id, size_t spare, ngx_http_weir_pzone_t **prev);
static ngx_shm_zone_t *ngx_http_weir_old_zone(ngx_conf_t *cf,
    ngx_str_t *name, size_t prefix);
static void ngx_http_weir_cluster_log(ngx_event_t *ev);


static ngx_int_t
ngx_http_weir_init_policy_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_weir_pzone_t  *opz = data;

    size_t                  len;
    ngx_slab_pool_t        *shpool;
    ngx_http_weir_pzone_t  *pz;

    pz = shm_zone->data;

    /* a directive zone kept across a reload: a changed key is refused */

    if (opz && pz->key.data
        && (pz->key.len != opz->key.len
            || ngx_strncmp(pz->key.data, opz->key.data, pz->key.len) != 0))
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "weir zone \"%V\" uses the \"%V\" key "
                      "while previously it used the \"%V\" key",
                      &pz->name, &pz->key, &opz->key);
        return NGX_ERROR;
    }

    /*
     * The zone's slab pool keeps its header at the start of the segment;
     * the region is one page-aligned allocation from it, found again through
     * shpool->data when the segment outlives a reload; the page in front of
     * it records its length.
     */

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if ((opz || shm_zone->shm.exists) && shpool->data) {
        len = *(size_t *) shpool->data;

    } else {
        len = pz->bytes;

        shpool->data = ngx_slab_alloc(shpool, len + ngx_pagesize);
        if (shpool->data) {
            *(size_t *) shpool->data = len;
        }
    }

    if (shpool->data == NULL || len != pz->bytes) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "could not place weir zone \"%V\" "
                      "(%uz bytes) in shared memory",
                      &shm_zone->shm.name, pz->bytes);
        return NGX_ERROR;
    }

    pz->region = (u_char *) shpool->data + ngx_pagesize;

    return NGX_OK;
}


/*
 * The counters zone is the last zone of its engine nginx initializes: by
 * then every zone of the engine has its region, and the engine is attached
 * here, in the master, before the workers fork.  A failure here fails the
 * reload (the running configuration stays), unlike one in the init module
 * handler, which is fatal to the master.
 */

static ngx_int_t
ngx_http_weir_init_counters_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_int_t                rc;
    ngx_uint_t               i, n;
    weir_error              *err;
    weir_region             *regions, *cluster, counters, old;
    ngx_http_weir_eng_t     *eng;
    ngx_http_weir_pzone_t   *cz, **pz;

    if (ngx_http_weir_init_policy_zone(shm_zone, data) != NGX_OK) {
        return NGX_ERROR;
    }

    cz = shm_zone->data;
    eng = cz->eng;
    n = eng->pzones.nelts;

    regions = ngx_calloc(2 * (n + 1) * sizeof(weir_region), shm_zone->shm.log);
    if (regions == NULL) {
        return NGX_ERROR;
    }

    cluster = regions + n + 1;

    pz = eng->pzones.elts;

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

    if (weir_engine_attach_shared(eng->policy, regions, n, cluster,
                                  &counters, 0,
                                  WEIR_ATTACH_DEFER_SYNC|WEIR_ATTACH_ZEROED,
                                  &eng->engine, &err)
        != WEIR_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0, "%V: %s%V",
                      &eng->what, weir_error_message(err), &eng->where);
        weir_error_free(err);
        rc = NGX_ERROR;

    } else if (cz->prev && cz->prev->region) {

        /*
         * the limits changed, so the counters moved to new memory: the bans
         * listed in the old one, still mapped here, stay listed
         */

        old.ptr = cz->prev->region;
        old.len = cz->prev->bytes;
        (void) weir_engine_carry_bans(eng->engine, &old);
    }

    ngx_free(regions);

    return rc;
}


/*
 * Adds the shared memory zones of the engine's zones ("PREFIX:NAME:ID"), of
 * their cluster regions ("PREFIX-cluster:NAME:ID") and of its counters
 * ("PREFIX-counters:ID"); the counters' is added last, so that its init,
 * which attaches the engine, runs after every zone's.
 */

ngx_int_t
ngx_http_weir_add_zones(ngx_conf_t *cf, ngx_http_weir_eng_t *eng,
    char *prefix)
{
    u_char                  zp[64], cp[64];
    size_t                  i, n, spare;
    weir_zone_info          zi;
    ngx_shm_zone_t         *shm_zone;
    ngx_http_weir_pzone_t  *pz, **ppz, *prev;

    ngx_sprintf(zp, "%s:%Z", prefix);
    ngx_sprintf(cp, "%s-cluster:%Z", prefix);

    n = weir_policy_zone_count(eng->policy);

    for (i = 0; i < n; i++) {

        if (weir_policy_zone(eng->policy, i, &zi) != WEIR_OK) {
            return NGX_ERROR;
        }

        pz = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_pzone_t));
        ppz = ngx_array_push(&eng->pzones);
        if (pz == NULL || ppz == NULL) {
            return NGX_ERROR;
        }

        *ppz = pz;
        pz->bytes = zi.bytes;

        pz->layout.len = weir_policy_zone_layout(eng->policy, i, NULL, 0);
        pz->layout.data = ngx_pnalloc(cf->pool, pz->layout.len);
        if (pz->layout.data == NULL) {
            return NGX_ERROR;
        }

        weir_policy_zone_layout(eng->policy, i, pz->layout.data,
                                pz->layout.len);

        if (ngx_http_weir_add_pzone(cf, pz, zp, (u_char *) zi.name,
                                    zi.name_len, zi.schema, zi.bytes / 32,
                                    &prev)
            == NULL)
        {
            return NGX_ERROR;
        }

        if (prev) {
            ngx_conf_log_error(NGX_LOG_NOTICE, cf, 0,
                               "weir zone \"%*s\" starts with fresh state: "
                               "its layout changed from \"%V\" to \"%V\"",
                               zi.name_len, zi.name, &prev->layout,
                               &pz->layout);
        }

        if (zi.cluster_bytes == 0) {
            continue;
        }

        /*
         * a cluster zone's second region: the other nodes' counts, what
         * this node pushed and the sync health, read by every worker
         */

        pz->cluster = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_pzone_t));
        if (pz->cluster == NULL) {
            return NGX_ERROR;
        }

        pz->cluster->bytes = zi.cluster_bytes;

        if (ngx_http_weir_add_pzone(cf, pz->cluster, cp, (u_char *) zi.name,
                                    zi.name_len, zi.schema,
                                    zi.cluster_bytes / 32, &prev)
            == NULL)
        {
            return NGX_ERROR;
        }
    }

    /*
     * the engine's counters, in shared memory so that every worker adds to
     * and weir_status reports the same numbers
     */

    pz = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_pzone_t));
    if (pz == NULL) {
        return NGX_ERROR;
    }

    pz->bytes = weir_policy_counters_bytes(eng->policy);
    pz->eng = eng;

    ngx_sprintf(zp, "%s-counters%Z", prefix);

    /*
     * the slab pool keeps one ngx_slab_page_t per page of the segment:
     * beyond a few megabytes (a policy of over a hundred limits) that is
     * more than the fixed room ngx_http_weir_add_pzone() leaves; a table's
     * spare (bytes / 32) already covers it
     */

    spare = (pz->bytes / ngx_pagesize + 1) * sizeof(ngx_slab_page_t);

    shm_zone = ngx_http_weir_add_pzone(cf, pz, zp, (u_char *) "", 0,
                                       weir_policy_counters_fingerprint(
                                           eng->policy),
                                       spare, &prev);
    if (shm_zone == NULL) {
        return NGX_ERROR;
    }

    if (prev) {
        ngx_conf_log_error(NGX_LOG_NOTICE, cf, 0,
                           "weir counters start from zero: "
                           "the policy's limits changed");
    }

    pz->prev = prev;

    shm_zone->init = ngx_http_weir_init_counters_zone;

    return NGX_OK;
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

static ngx_shm_zone_t *
ngx_http_weir_add_pzone(ngx_conf_t *cf, ngx_http_weir_pzone_t *pz,
    u_char *prefix, u_char *name, size_t len, uint64_t id, size_t spare,
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

static ngx_shm_zone_t *
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
    ngx_uint_t                  i, any;
    weir_error                 *err;
    weir_engine                *engines[2];
    ngx_http_weir_main_conf_t  *wmcf;

    ngx_http_weir_renew_init(cycle);

    wmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_weir_module);

    if (wmcf == NULL) {
        return NGX_OK;
    }

    /* the policy's engine and the directives' */

    engines[0] = wmcf->pol.engine;
    engines[1] = wmcf->dir.engine;
    any = 0;

    for (i = 0; i < 2; i++) {
        if (engines[i] == NULL || !weir_engine_has_cluster(engines[i])) {
            continue;
        }

        if (!any) {
            weir_cluster_log_queue();
            any = 1;
        }

        /* the syncer threads must not take the worker's signals */

        err = NULL;

        if (weir_engine_start_sync_masked(engines[i], &err) != WEIR_OK) {
            /* the worker still serves requests, on the fallback share */
            ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                          "weir: cannot start the cluster syncers: %s",
                          weir_error_message(err));
            weir_error_free(err);

            /* those that started are stopped at exit, their messages drained */
        }
    }

    if (!any) {
        return NGX_OK;
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

    /* the leaders resign: another worker takes over at once */

    if (wmcf && wmcf->pol.engine) {
        weir_engine_stop_sync(wmcf->pol.engine);
    }

    if (wmcf && wmcf->dir.engine) {
        weir_engine_stop_sync(wmcf->dir.engine);
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

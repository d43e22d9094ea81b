
/*
 * weir: nginx module, the directives shaped like limit_req and limit_conn:
 * weir_req_zone, weir_conn_zone, weir_req, weir_conn, their zones' init,
 * and the limiters built from them once the configuration is read.
 */


#include "ngx_http_weir_module.h"


static ngx_int_t ngx_http_weir_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_uint_t ngx_http_weir_param(ngx_str_t *value, char *name,
    ngx_str_t *arg);
static ngx_http_weir_limit_t *ngx_http_weir_add_limit(ngx_conf_t *cf,
    ngx_array_t **limits, ngx_shm_zone_t *shm_zone);


static ngx_int_t
ngx_http_weir_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_weir_zone_ctx_t  *octx = data;

    int                        existed;
    void                      *region;
    size_t                     len, rescaled;
    weir_error                *err;
    ngx_http_weir_zone_ctx_t  *ctx;

    ctx = shm_zone->data;

    if (octx) {
        if (ctx->key.value.len != octx->key.value.len
            || ngx_strncmp(ctx->key.value.data, octx->key.value.data,
                           ctx->key.value.len)
               != 0)
        {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "weir zone \"%V\" uses the \"%V\" key "
                          "while previously it used the \"%V\" key",
                          &shm_zone->shm.name, &ctx->key.value,
                          &octx->key.value);
            return NGX_ERROR;
        }
    }

    len = 0;
    region = ngx_http_weir_shm_region(shm_zone, octx != NULL, &len);

    if (region == NULL) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "weir zone \"%V\" is too small", &shm_zone->shm.name);
        return NGX_ERROR;
    }

    err = NULL;

    /*
     * a region without a table is fresh slab pages of a new zone, all zero:
     * only its header is written, so a large zone costs nothing until used
     */

    if (weir_zone_attach_zeroed(region, len, ctx->schema, 0, &existed,
                                &ctx->zone, &err)
        != WEIR_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "weir zone \"%V\": %s", &shm_zone->shm.name,
                      weir_error_message(err));
        weir_error_free(err);
        return NGX_ERROR;
    }

    if (ctx->kind != NGX_HTTP_WEIR_GCRA) {
        return NGX_OK;
    }

    /* a changed rate: every key keeps its excess, as with limit_req */

    rescaled = 0;

    if (weir_zone_set_gcra_rate(ctx->zone, ctx->count, ctx->period_ns,
                                weir_now_ns(), &rescaled)
        != WEIR_OK)
    {
        return NGX_ERROR;
    }

    if (rescaled) {
        ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                      "weir zone \"%V\": the rate changed; live keys keep "
                      "their excess (%uz)", &shm_zone->shm.name, rescaled);
    }

    return NGX_OK;
}


/* "NAME=ARG": ARG in *arg when value starts with name */

static ngx_uint_t
ngx_http_weir_param(ngx_str_t *value, char *name, ngx_str_t *arg)
{
    size_t  len;

    len = ngx_strlen(name);

    if (value->len < len || ngx_strncmp(value->data, name, len) != 0) {
        return 0;
    }

    arg->data = value->data + len;
    arg->len = value->len - len;

    return 1;
}


/*
 * "rate=" through the policy's parser, so that a bad rate gets the same words
 * in nginx.conf as in a policy file; a bare number is requests per second, as
 * with limit_req
 */

static ngx_int_t
ngx_http_weir_parse_rate(ngx_conf_t *cf, ngx_str_t *s, weir_rate *rate)
{
    u_char      buf[NGX_INT64_LEN + 4], *last;
    char        err[256];
    ngx_str_t   text;
    ngx_uint_t  i;

    text = *s;

    for (i = 0; i < text.len && text.data[i] >= '0' && text.data[i] <= '9';
         i++)
    {
        /* void */
    }

    if (i > 0 && i == text.len && i <= NGX_INT64_LEN) {
        last = ngx_cpymem(buf, text.data, text.len);
        last = ngx_cpymem(last, "r/s", 3);
        text.data = buf;
        text.len = last - buf;
    }

    if (weir_parse_rate(text.data, text.len, rate, err, sizeof(err))
        != WEIR_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", err);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* FNV-1a, for the zone schema */

static uint64_t
ngx_http_weir_hash(uint64_t h, u_char *p, size_t len)
{
    if (h == 0) {
        h = 0xcbf29ce484222325ULL;
    }

    while (len--) {
        h ^= *p++;
        h *= 0x100000001b3ULL;
    }

    return h;
}


char *
ngx_http_weir_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_main_conf_t *wmcf = conf;

    u_char                            *p;
    ssize_t                            size;
    ngx_str_t                         *value, name, s, tag;
    ngx_int_t                          events;
    weir_rate                          rate;
    ngx_msec_t                         window, lease;
    ngx_uint_t                         i, conn;
    const char                        *what;
    ngx_shm_zone_t                    *shm_zone, *old;
    ngx_http_weir_zone_ctx_t          *ctx, *octx, **pctx;
    ngx_http_compile_complex_value_t   ccv;

    value = cf->args->elts;
    conn = (cmd->offset == NGX_HTTP_WEIR_CONCURRENCY);

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_zone_ctx_t));
    if (ctx == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = &ctx->key;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    size = 0;
    rate.count = 0;
    rate.period_ns = 0;
    events = 0;
    window = 0;
    lease = 0;
    name.len = 0;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_http_weir_param(&value[i], "zone=", &name)) {

            p = (u_char *) ngx_strchr(name.data, ':');

            if (p == NULL) {
                what = "zone size";
                goto invalid;
            }

            s.data = p + 1;
            s.len = value[i].data + value[i].len - s.data;
            name.len = p - name.data;

            size = ngx_parse_size(&s);

            if (size == NGX_ERROR) {
                what = "zone size";
                goto invalid;
            }

            if (size < (ssize_t) (8 * ngx_pagesize)) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "zone \"%V\" is too small", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (!conn && ngx_http_weir_param(&value[i], "rate=", &s)) {

            if (ngx_http_weir_parse_rate(cf, &s, &rate) != NGX_OK) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (!conn && ngx_http_weir_param(&value[i], "events=", &s)) {

            events = ngx_atoi(s.data, s.len);
            if (events <= 0) {
                what = "events";
                goto invalid;
            }

            continue;
        }

        if (!conn && ngx_http_weir_param(&value[i], "window=", &s)) {

            window = ngx_parse_time(&s, 0);
            if (window == (ngx_msec_t) NGX_ERROR || window == 0) {
                what = "window";
                goto invalid;
            }

            continue;
        }

        if (conn && ngx_http_weir_param(&value[i], "lease=", &s)) {

            lease = ngx_parse_time(&s, 0);
            if (lease == (ngx_msec_t) NGX_ERROR || lease == 0) {
                what = "lease";
                goto invalid;
            }

            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (conn) {
        ctx->kind = NGX_HTTP_WEIR_CONCURRENCY;
        ctx->lease_ns = (uint64_t) lease * 1000000;
        ngx_str_set(&tag, "concurrency");

    } else if (events || window) {

        if (rate.count) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"rate\" cannot be combined with "
                               "\"events\" and \"window\"");
            return NGX_CONF_ERROR;
        }

        if (events == 0 || window == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "a sliding window needs both "
                               "\"events\" and \"window\"");
            return NGX_CONF_ERROR;
        }

        ctx->kind = NGX_HTTP_WEIR_SLIDING;
        ctx->count = events;
        ctx->period_ns = (uint64_t) window * 1000000;
        ngx_str_set(&tag, "sliding");

    } else {
        if (rate.count == 0) {
            rate.count = 1;
            rate.period_ns = NGX_HTTP_WEIR_NS;
        }

        ctx->kind = NGX_HTTP_WEIR_GCRA;

        if (rate.period_ns <= 60 * NGX_HTTP_WEIR_NS) {
            /* nginx keeps the rate in milli-requests per second */
            ctx->count = rate.count * 1000 * NGX_HTTP_WEIR_NS / rate.period_ns;
            ctx->period_ns = 1000 * NGX_HTTP_WEIR_NS;

            if (ctx->count == 0) {
                ctx->count = 1;
            }

        } else {
            ctx->count = rate.count;
            ctx->period_ns = rate.period_ns;
        }

        ngx_str_set(&tag, "gcra");
    }

    /* a changed key or algorithm makes the old state meaningless */

    ctx->schema = ngx_http_weir_hash(0, ctx->key.value.data,
                                     ctx->key.value.len);
    ctx->schema = ngx_http_weir_hash(ctx->schema, tag.data, tag.len);

    if (ctx->kind == NGX_HTTP_WEIR_SLIDING) {
        ctx->schema = ngx_http_weir_hash(ctx->schema,
                                         (u_char *) &ctx->period_ns,
                                         sizeof(uint64_t));
    }

    shm_zone = ngx_shared_memory_add(cf, &name, size, &ngx_http_weir_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (shm_zone->data) {
        ctx = shm_zone->data;

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "%V \"%V\" is already bound to key \"%V\"",
                           &cmd->name, &name, &ctx->key.value);
        return NGX_CONF_ERROR;
    }

    /*
     * the memory of a zone kept with the same name and size is shared with
     * the running workers, which go on reading its states the old way
     */

    old = ngx_http_weir_old_zone(cf, &name, name.len);

    if (old && old->init == ngx_http_weir_init_zone
        && old->shm.size == shm_zone->shm.size)
    {
        octx = old->data;

        if (octx->schema != ctx->schema
            && octx->key.value.len == ctx->key.value.len
            && ngx_strncmp(octx->key.value.data, ctx->key.value.data,
                           ctx->key.value.len)
               == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "weir zone \"%V\" changed its algorithm or "
                               "window; give the zone a new name or another "
                               "size to start it afresh", &name);
            return NGX_CONF_ERROR;
        }
    }

    ctx->shm_zone = shm_zone;

    shm_zone->init = ngx_http_weir_init_zone;
    shm_zone->data = ctx;

    pctx = ngx_array_push(&wmcf->zones);
    if (pctx == NULL) {
        return NGX_CONF_ERROR;
    }

    *pctx = ctx;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid %s \"%V\"", what,
                       &value[i]);
    return NGX_CONF_ERROR;
}


static ngx_http_weir_limit_t *
ngx_http_weir_add_limit(ngx_conf_t *cf, ngx_array_t **limits,
    ngx_shm_zone_t *shm_zone)
{
    ngx_uint_t                   i;
    ngx_http_weir_limit_t       *limit, **p;
    ngx_http_weir_main_conf_t   *wmcf;

    if (*limits == NULL) {
        *limits = ngx_array_create(cf->pool, 1,
                                   sizeof(ngx_http_weir_limit_t *));
        if (*limits == NULL) {
            return NULL;
        }
    }

    p = (*limits)->elts;

    for (i = 0; i < (*limits)->nelts; i++) {
        if (shm_zone == p[i]->shm_zone) {
            return NGX_CONF_UNSET_PTR;
        }
    }

    limit = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_limit_t));
    if (limit == NULL) {
        return NULL;
    }

    limit->shm_zone = shm_zone;
    limit->file = cf->conf_file->file.name;
    limit->line = cf->conf_file->line;

    p = ngx_array_push(*limits);
    if (p == NULL) {
        return NULL;
    }

    *p = limit;

    wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

    p = ngx_array_push(&wmcf->limits);
    if (p == NULL) {
        return NULL;
    }

    *p = limit;

    return limit;
}


char *
ngx_http_weir_req_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_loc_conf_t  *wlcf = conf;

    ngx_int_t                  burst, delay;
    ngx_str_t                 *value, s;
    ngx_uint_t                 i;
    ngx_shm_zone_t            *shm_zone;
    ngx_http_weir_limit_t     *limit;

    value = cf->args->elts;

    shm_zone = NULL;
    burst = 0;
    delay = 0;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_weir_param(&value[i], "zone=", &s)) {

            shm_zone = ngx_shared_memory_add(cf, &s, 0,
                                             &ngx_http_weir_module);
            if (shm_zone == NULL) {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_http_weir_param(&value[i], "burst=", &s)) {

            burst = ngx_atoi(s.data, s.len);
            if (burst <= 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid burst value \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_http_weir_param(&value[i], "delay=", &s)) {

            delay = ngx_atoi(s.data, s.len);
            if (delay <= 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid delay value \"%V\"", &value[i]);
                return NGX_CONF_ERROR;
            }

            continue;
        }

        if (ngx_strcmp(value[i].data, "nodelay") == 0) {
            delay = -1;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    if (shm_zone == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    limit = ngx_http_weir_add_limit(cf, &wlcf->req_limits, shm_zone);

    if (limit == NULL) {
        return NGX_CONF_ERROR;
    }

    if (limit == NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    limit->burst = burst;
    limit->delay = delay;

    return NGX_CONF_OK;
}


char *
ngx_http_weir_conn_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_loc_conf_t  *wlcf = conf;

    ngx_int_t                  n;
    ngx_str_t                 *value;
    ngx_shm_zone_t            *shm_zone;
    ngx_http_weir_limit_t     *limit;

    value = cf->args->elts;

    shm_zone = ngx_shared_memory_add(cf, &value[1], 0, &ngx_http_weir_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    n = ngx_atoi(value[2].data, value[2].len);
    if (n <= 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid number of connections \"%V\"", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (n > 65535) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "connection limit must be less 65536");
        return NGX_CONF_ERROR;
    }

    limit = ngx_http_weir_add_limit(cf, &wlcf->conn_limits, shm_zone);

    if (limit == NULL) {
        return NGX_CONF_ERROR;
    }

    if (limit == NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    limit->conn = n;

    return NGX_CONF_OK;
}


/* limiters need the zone's parameters, known once the whole file is read */

ngx_int_t
ngx_http_weir_init_limits(ngx_conf_t *cf, ngx_http_weir_main_conf_t *wmcf)
{
    int                          rc;
    ngx_uint_t                   i;
    weir_error                  *err;
    ngx_http_weir_limit_t      **limits, *lim;
    ngx_http_weir_zone_ctx_t    *ctx;

    limits = wmcf->limits.elts;

    for (i = 0; i < wmcf->limits.nelts; i++) {
        lim = limits[i];
        ctx = lim->shm_zone->data;

        if (ctx == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "unknown weir zone \"%V\" in %V:%ui",
                          &lim->shm_zone->shm.name, &lim->file, lim->line);
            return NGX_ERROR;
        }

        err = NULL;

        if (lim->conn) {
            if (ctx->kind != NGX_HTTP_WEIR_CONCURRENCY) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "weir_conn uses the weir_req_zone \"%V\" "
                              "in %V:%ui", &lim->shm_zone->shm.name,
                              &lim->file, lim->line);
                return NGX_ERROR;
            }

            rc = weir_limiter_concurrency(lim->conn, ctx->lease_ns,
                                          &lim->limiter, &err);

        } else if (ctx->kind == NGX_HTTP_WEIR_CONCURRENCY) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "weir_req uses the weir_conn_zone \"%V\" in %V:%ui",
                          &lim->shm_zone->shm.name, &lim->file, lim->line);
            return NGX_ERROR;

        } else if (ctx->kind == NGX_HTTP_WEIR_SLIDING) {
            if (lim->burst || lim->delay) {
                ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                              "\"burst\", \"delay\" and \"nodelay\" do not "
                              "apply to the sliding window zone \"%V\" "
                              "in %V:%ui", &lim->shm_zone->shm.name,
                              &lim->file, lim->line);
                return NGX_ERROR;
            }

            rc = weir_limiter_sliding(ctx->count, ctx->period_ns,
                                      &lim->limiter, &err);

        } else {
            if (lim->delay > lim->burst) {
                /* nginx treats delay beyond the burst as nodelay */
                lim->delay = -1;
            }

            rc = weir_limiter_gcra(ctx->count, ctx->period_ns, lim->burst,
                                   lim->delay, &lim->limiter, &err);
        }

        if (rc != WEIR_OK) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "weir: %s in %V:%ui", weir_error_message(err),
                          &lim->file, lim->line);
            weir_error_free(err);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}

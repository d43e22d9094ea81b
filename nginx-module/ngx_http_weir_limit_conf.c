
/*
 * weir: nginx module, the directives shaped like limit_req and limit_conn:
 * weir_req_zone, weir_conn_zone, weir_req and weir_conn declare zones and
 * limits of one engine (weir's host limits), built and placed in shared
 * memory once the configuration is read.  Zone "NAME" keys its limits by
 * the variable "NAME", the zone's key as the request evaluates it.
 */


#include "ngx_http_weir_module.h"


#define NGX_HTTP_WEIR_MAX_SELECTED  32


static void ngx_http_weir_build_error(void *ctx, int64_t limit,
    int64_t zone, const uint8_t *msg, size_t len);


/*
 * weir_req_zone and weir_conn_zone: the engine reads the arguments and
 * declares the zone; the module compiles the key
 */

char *
ngx_http_weir_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_main_conf_t *wmcf = conf;

    char                               err[512];
    ngx_str_t                         *value;
    weir_arg                           name;
    ngx_http_weir_dzone_t             *dz;
    ngx_http_compile_complex_value_t   ccv;

    value = cf->args->elts;

    dz = ngx_array_push(&wmcf->dzones);
    if (dz == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(dz, sizeof(ngx_http_weir_dzone_t));

    dz->max_key = (cmd->offset == WEIR_ALGORITHM_CONCURRENCY) ? 255 : 65535;
    dz->file = cf->conf_file->file.name;
    dz->line = cf->conf_file->line;

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = &dz->key;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    /* ngx_str_t and weir_arg share their layout: length, then bytes */

    if (weir_host_limits_zone_args(wmcf->host, (weir_arg *) value,
                                   cf->args->nelts,
                                   cmd->offset == WEIR_ALGORITHM_CONCURRENCY,
                                   8 * ngx_pagesize, &name, err, sizeof(err))
        != WEIR_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", err);
        return NGX_CONF_ERROR;
    }

    dz->name.data = (u_char *) name.data;
    dz->name.len = name.len;

    return NGX_CONF_OK;
}


/* weir_req and weir_conn: their limit in the location's list */

char *
ngx_http_weir_limit_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char                    err[512];
    ngx_uint_t              i;
    ngx_array_t           **limits;
    weir_directive_limit    la;
    ngx_http_weir_limit_t  *limit, **p;

    limits = (ngx_array_t **) ((char *) conf + cmd->offset);

    if (weir_limit_args((weir_arg *) cf->args->elts, cf->args->nelts,
                        cmd->offset
                        == offsetof(ngx_http_weir_loc_conf_t, conn_limits),
                        &la, err, sizeof(err))
        != WEIR_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", err);
        return NGX_CONF_ERROR;
    }

    if (*limits == NULL) {
        *limits = ngx_array_create(cf->pool, 1,
                                   sizeof(ngx_http_weir_limit_t *));
        if (*limits == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    p = (*limits)->elts;

    for (i = 0; i < (*limits)->nelts; i++) {
        if (p[i]->spec.zone_len == la.zone_len
            && ngx_strncmp(p[i]->spec.zone, la.zone, la.zone_len) == 0)
        {
            return "is duplicate";
        }
    }

    limit = ngx_pcalloc(cf->pool, sizeof(ngx_http_weir_limit_t));
    p = ngx_array_push(*limits);
    if (limit == NULL || p == NULL) {
        return NGX_CONF_ERROR;
    }

    *p = limit;

    limit->spec = la;
    limit->file = cf->conf_file->file.name;
    limit->line = cf->conf_file->line;

    return NGX_CONF_OK;
}


/*
 * The engine limits of a location's directives: one per directive and
 * dry-run and status setting, shared by the locations that agree on them.
 */

char *
ngx_http_weir_select(ngx_conf_t *cf, ngx_array_t *limits, ngx_flag_t dry_run,
    ngx_uint_t status, ngx_http_weir_sel_t *sel)
{
    ngx_uint_t                   i, max;
    ngx_http_weir_limit_t      **lim;
    ngx_http_weir_main_conf_t   *wmcf;

    wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

    lim = limits->elts;
    max = lim[0]->spec.max ? WEIR_MAX_PERMITS : NGX_HTTP_WEIR_MAX_SELECTED;

    if (limits->nelts > max) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "more than %ui zones of this kind limit "
                           "one location", max);
        return NGX_CONF_ERROR;
    }

    sel->n = limits->nelts;
    sel->index = ngx_palloc(cf->pool, sel->n * sizeof(uint16_t));
    if (sel->index == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < limits->nelts; i++) {
        if (weir_host_limits_select(wmcf->host, &lim[i]->spec, dry_run ? 1 : 0,
                                    status, (uintptr_t) lim[i],
                                    &sel->index[i])
            != WEIR_OK)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid weir zone name \"%*s\"",
                               lim[i]->spec.zone_len, lim[i]->spec.zone);
            return NGX_CONF_ERROR;
        }
    }

    wmcf->selected = 1;

    return NGX_CONF_OK;
}


/*
 * The engine of the directives, built once the whole file is read; its
 * zones get their shared memory, where the engine is attached
 */

ngx_int_t
ngx_http_weir_init_limits(ngx_conf_t *cf, ngx_http_weir_main_conf_t *wmcf)
{
    size_t                  z;
    int64_t                 n;
    ngx_uint_t              i;
    weir_zone_info          zi;
    ngx_http_weir_pzone_t **pz;
    ngx_http_weir_dzone_t  *dz;

    if (!wmcf->selected) {
        /* zones no directive uses: nothing to build */
        return NGX_OK;
    }

    if (weir_host_limits_build_each(wmcf->host, &wmcf->dir.policy,
                                    ngx_http_weir_build_error, cf)
        != WEIR_OK)
    {
        return NGX_ERROR;
    }

    ngx_str_set(&wmcf->dir.what, "weir zones");

    if (ngx_http_weir_add_zones(cf, &wmcf->dir, "weir-directive") != NGX_OK) {
        return NGX_ERROR;
    }

    /* a kept zone's key is compared with the running one's */

    pz = wmcf->dir.pzones.elts;
    dz = wmcf->dzones.elts;

    for (z = 0; z < wmcf->dir.pzones.nelts; z++) {
        if (weir_policy_zone(wmcf->dir.policy, z, &zi) != WEIR_OK) {
            return NGX_ERROR;
        }

        for (i = 0; i < wmcf->dzones.nelts; i++) {
            if (dz[i].name.len == zi.name_len
                && ngx_strncmp(dz[i].name.data, zi.name, zi.name_len) == 0)
            {
                pz[z]->name = dz[i].name;
                pz[z]->key = dz[i].key.value;
            }
        }
    }

    /* the zone of each of the engine's variables */

    wmcf->vars = ngx_pcalloc(cf->pool, wmcf->dzones.nelts
                                       * sizeof(ngx_http_weir_dzone_t *));
    if (wmcf->vars == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < wmcf->dzones.nelts; i++) {
        n = weir_policy_var_index(wmcf->dir.policy, dz[i].name.data,
                                  dz[i].name.len);

        if (n >= 0 && (ngx_uint_t) n < wmcf->dzones.nelts) {
            wmcf->vars[n] = &dz[i];
        }
    }

    return NGX_OK;
}


/* an engine build error, logged at its directive's file:line */

static void
ngx_http_weir_build_error(void *ctx, int64_t limit, int64_t zone,
    const uint8_t *msg, size_t len)
{
    ngx_conf_t  *cf = ctx;

    ngx_str_t                   file;
    ngx_uint_t                  line;
    ngx_http_weir_limit_t      *lim;
    ngx_http_weir_dzone_t      *dz;
    ngx_http_weir_main_conf_t  *wmcf;

    wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

    file = cf->conf_file->file.name;
    line = cf->conf_file->line;

    lim = (ngx_http_weir_limit_t *) (uintptr_t)
              weir_host_limits_origin(wmcf->host, limit);
    dz = wmcf->dzones.elts;

    if (lim) {
        cf->conf_file->file.name = lim->file;
        cf->conf_file->line = lim->line;

    } else if (zone >= 0 && (ngx_uint_t) zone < wmcf->dzones.nelts) {
        cf->conf_file->file.name = dz[zone].file;
        cf->conf_file->line = dz[zone].line;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%*s", len, msg);

    cf->conf_file->file.name = file;
    cf->conf_file->line = line;
}


/*
 * weir: nginx module, the directives shaped like limit_req and limit_conn:
 * weir_req_zone, weir_conn_zone, weir_req and weir_conn declare zones and
 * limits of one engine (weir's host limits), built and placed in shared
 * memory once the configuration is read.  Zone "NAME" keys its limits by
 * the variable "NAME", the zone's key as the request evaluates it.
 */


#include "ngx_http_weir_module.h"


#define NGX_HTTP_WEIR_MAX_SELECTED  32


static ngx_uint_t ngx_http_weir_param(ngx_str_t *value, char *name,
    ngx_str_t *arg);
static ngx_int_t ngx_http_weir_parse_rate(ngx_conf_t *cf, ngx_str_t *s,
    weir_rate *rate);
static char *ngx_http_weir_add_limit(ngx_conf_t *cf, ngx_array_t **limits,
    ngx_str_t *zone, ngx_int_t burst, ngx_int_t delay, ngx_uint_t conn);
static void ngx_http_weir_build_errors(ngx_conf_t *cf,
    ngx_http_weir_main_conf_t *wmcf, char *errors);


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


char *
ngx_http_weir_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_main_conf_t *wmcf = conf;

    u_char                            *p;
    ssize_t                            size;
    ngx_str_t                         *value, name, s;
    ngx_int_t                          events;
    ngx_msec_t                         window;
    ngx_uint_t                         i, conn;
    const char                        *what;
    weir_zone_spec                     spec;
    ngx_http_weir_dzone_t             *dz;
    ngx_http_compile_complex_value_t   ccv;

    value = cf->args->elts;
    conn = (cmd->offset == WEIR_ALGORITHM_CONCURRENCY);

    dz = ngx_array_push(&wmcf->dzones);
    if (dz == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(dz, sizeof(ngx_http_weir_dzone_t));
    ngx_memzero(&spec, sizeof(weir_zone_spec));

    dz->max_key = conn ? 255 : 65535;
    dz->file = cf->conf_file->file.name;
    dz->line = cf->conf_file->line;

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = &dz->key;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    size = 0;
    events = 0;
    window = 0;
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

            if (ngx_http_weir_parse_rate(cf, &s, &spec.rate) != NGX_OK) {
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
            /* accepted for older configurations: the engine's lease applies */
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

    dz->name = name;
    spec.size = size;

    if (conn) {
        /* each weir_conn gives its own number */
        spec.algorithm = WEIR_ALGORITHM_CONCURRENCY;

    } else if (events || window) {

        if (spec.rate.count) {
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

        spec.algorithm = WEIR_ALGORITHM_SLIDING;
        spec.events = events;
        spec.window_ns = (uint64_t) window * 1000000;

    } else {
        spec.algorithm = WEIR_ALGORITHM_GCRA;

        if (spec.rate.count == 0) {
            spec.rate.count = 1;
            spec.rate.period_ns = 1000000000;
        }
    }

    if (weir_host_limits_zone(wmcf->host, name.data, name.len, &spec)
        != WEIR_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid zone name \"%V\"",
                           &name);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid %s \"%V\"", what,
                       &value[i]);
    return NGX_CONF_ERROR;
}


static char *
ngx_http_weir_add_limit(ngx_conf_t *cf, ngx_array_t **limits,
    ngx_str_t *zone, ngx_int_t burst, ngx_int_t delay, ngx_uint_t conn)
{
    ngx_uint_t               i;
    ngx_http_weir_limit_t   *limit, **p;

    if (*limits == NULL) {
        *limits = ngx_array_create(cf->pool, 1,
                                   sizeof(ngx_http_weir_limit_t *));
        if (*limits == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    p = (*limits)->elts;

    for (i = 0; i < (*limits)->nelts; i++) {
        if (p[i]->zone.len == zone->len
            && ngx_strncmp(p[i]->zone.data, zone->data, zone->len) == 0)
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

    limit->zone = *zone;
    limit->burst = burst;
    limit->delay = delay;
    limit->conn = conn;
    limit->file = cf->conf_file->file.name;
    limit->line = cf->conf_file->line;

    return NGX_CONF_OK;
}


char *
ngx_http_weir_req_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_loc_conf_t  *wlcf = conf;

    ngx_int_t                  burst, delay;
    ngx_str_t                 *value, s, zone;
    ngx_uint_t                 i;

    value = cf->args->elts;

    zone.len = 0;
    burst = 0;
    delay = 0;

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_http_weir_param(&value[i], "zone=", &zone)) {
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

    if (zone.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must have \"zone\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (delay > burst) {
        /* nginx lets a delay beyond the burst mean nodelay */
        delay = -1;
    }

    return ngx_http_weir_add_limit(cf, &wlcf->req_limits, &zone, burst, delay,
                                   0);
}


char *
ngx_http_weir_conn_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_weir_loc_conf_t  *wlcf = conf;

    ngx_int_t                  n;
    ngx_str_t                 *value;

    value = cf->args->elts;

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

    return ngx_http_weir_add_limit(cf, &wlcf->conn_limits, &value[1], 0, 0,
                                   n);
}


/*
 * The engine limits of a location's directives: one per directive and
 * dry-run and status setting, shared by the locations that agree on them.
 */

char *
ngx_http_weir_select(ngx_conf_t *cf, ngx_array_t *limits, ngx_flag_t dry_run,
    ngx_uint_t status, ngx_http_weir_sel_t *sel)
{
    u_char                      *key;
    uint16_t                     index;
    ngx_uint_t                   i, k;
    weir_limit_spec              ls;
    ngx_http_weir_limit_t      **lim;
    ngx_http_weir_elimit_t      *el;
    ngx_http_weir_main_conf_t   *wmcf;

    wmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_weir_module);

    lim = limits->elts;
    k = lim[0]->conn ? WEIR_MAX_PERMITS : NGX_HTTP_WEIR_MAX_SELECTED;

    if (limits->nelts > k) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "more than %ui zones of this kind limit "
                           "one location", k);
        return NGX_CONF_ERROR;
    }

    sel->n = limits->nelts;
    sel->index = ngx_palloc(cf->pool, sel->n * sizeof(uint16_t));
    if (sel->index == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 0; i < limits->nelts; i++) {
        el = wmcf->elimits.elts;

        for (k = 0; k < wmcf->elimits.nelts; k++) {
            if (el[k].limit == lim[i] && el[k].dry_run == dry_run
                && el[k].status == status)
            {
                break;
            }
        }

        if (k < wmcf->elimits.nelts) {
            sel->index[i] = (uint16_t) k;
            continue;
        }

        key = ngx_pnalloc(cf->pool, lim[i]->zone.len + 4);
        el = ngx_array_push(&wmcf->elimits);
        if (key == NULL || el == NULL) {
            return NGX_CONF_ERROR;
        }

        el->limit = lim[i];
        el->dry_run = dry_run;
        el->status = status;

        ngx_memzero(&ls, sizeof(weir_limit_spec));

        ls.zone = lim[i]->zone.data;
        ls.zone_len = lim[i]->zone.len;
        ls.key = key;
        ls.key_len = ngx_sprintf(key, "var:%V", &lim[i]->zone) - key;
        ls.ipv4_prefix = -1;
        ls.ipv6_prefix = -1;
        ls.burst = lim[i]->burst;
        ls.delay = lim[i]->delay;
        ls.dry_run = dry_run ? 1 : 0;
        ls.status = status;
        ls.log_level = 3;
        ls.max = lim[i]->conn;

        if (weir_host_limits_limit(wmcf->host, &ls, &index) != WEIR_OK
            || index != wmcf->elimits.nelts - 1)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid weir zone name \"%V\"",
                               &lim[i]->zone);
            return NGX_CONF_ERROR;
        }

        sel->index[i] = index;
    }

    return NGX_CONF_OK;
}


/*
 * The engine of the directives, built once the whole file is read; its
 * zones get their shared memory, where the engine is attached
 */

ngx_int_t
ngx_http_weir_init_limits(ngx_conf_t *cf, ngx_http_weir_main_conf_t *wmcf)
{
    char                    errors[4096];
    size_t                  z;
    ngx_uint_t              i;
    weir_zone_info          zi;
    ngx_http_weir_pzone_t **pz;
    ngx_http_weir_dzone_t  *dz;

    if (wmcf->elimits.nelts == 0) {
        /* zones no directive uses: nothing to build */
        return NGX_OK;
    }

    if (weir_host_limits_build(wmcf->host, &wmcf->dir.policy, errors,
                               sizeof(errors))
        != WEIR_OK)
    {
        ngx_http_weir_build_errors(cf, wmcf, errors);
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

    wmcf->vars = ngx_pcalloc(cf->pool, wmcf->dzones.nelts
                                       * sizeof(ngx_http_weir_dzone_t *));
    if (wmcf->vars == NULL) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The engine's build errors, one a line ("limit N (zone ...): ..." or
 * "zone "NAME": ..."), each logged at its directive's file:line
 */

static void
ngx_http_weir_build_errors(ngx_conf_t *cf, ngx_http_weir_main_conf_t *wmcf,
    char *errors)
{
    u_char                  *p, *eol, *q;
    ngx_str_t                file, msg;
    ngx_int_t                n;
    ngx_uint_t               line, i;
    ngx_http_weir_dzone_t   *dz;
    ngx_http_weir_elimit_t  *el;

    file = cf->conf_file->file.name;
    line = cf->conf_file->line;

    el = wmcf->elimits.elts;
    dz = wmcf->dzones.elts;

    for (p = (u_char *) errors; *p; p = (*eol ? eol + 1 : eol)) {
        eol = (u_char *) ngx_strchr(p, '\n');
        if (eol == NULL) {
            eol = p + ngx_strlen(p);
        }

        msg.data = p;
        msg.len = eol - p;

        if (ngx_strncmp(p, "limit ", 6) == 0) {
            for (q = p + 6; q < eol && *q >= '0' && *q <= '9'; q++) {
                /* void */
            }

            n = ngx_atoi(p + 6, q - (p + 6));

            if (n >= 0 && (ngx_uint_t) n < wmcf->elimits.nelts) {
                cf->conf_file->file.name = el[n].limit->file;
                cf->conf_file->line = el[n].limit->line;
            }

        } else if (ngx_strncmp(p, "zone \"", 6) == 0) {
            for (i = 0; i < wmcf->dzones.nelts; i++) {
                if (p + 6 + dz[i].name.len < eol
                    && ngx_strncmp(p + 6, dz[i].name.data, dz[i].name.len)
                       == 0
                    && p[6 + dz[i].name.len] == '"')
                {
                    cf->conf_file->file.name = dz[i].file;
                    cf->conf_file->line = dz[i].line;
                    break;
                }
            }
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%V", &msg);

        cf->conf_file->file.name = file;
        cf->conf_file->line = line;
    }
}

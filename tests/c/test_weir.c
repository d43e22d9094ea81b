/*
 * The C ABI from C: every shared test vector, bad inputs, and a fork-based multi-process run
 * over one shared region. Built with -Wall -Wextra -Werror and run under ASan+UBSan and under
 * valgrind (see the Makefile's c-test target).
 *
 *   test_weir VECTOR_DIR
 */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "weir.h"

static int failures;
static int checks;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        checks++;                                                            \
        if (!(cond)) {                                                       \
            failures++;                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
        }                                                                    \
    } while (0)

#define BASE_NS 1000000000000ULL
#define MS 1000000ULL

/* ---------------------------------------------------------------------------------------- */
/* Shared vectors */

/* The engine whose requests json_header answers, and how many header names the vectors'
 * engines listed in all. */
static const weir_engine *asking;
static size_t listed_headers;

/* Whether the engine lists `lname` among the headers its policy reads. */
static int
listed(const weir_engine *e, const uint8_t *lname, size_t lname_len)
{
    const uint8_t *n;
    size_t len;

    for (size_t i = 0; weir_engine_header_name(e, i, &n, &len) == WEIR_OK; i++) {
        if (len == lname_len && memcmp(n, lname, len) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Header lookup over a cJSON array of [name, value] pairs. Also checks that the engine asks
 * only for headers it lists (hosts may copy only those). */
static int
json_header(void *ctx, const uint8_t *lname, size_t lname_len, size_t nth,
    const uint8_t **value, size_t *value_len)
{
    const cJSON *headers = cJSON_GetObjectItem(ctx, "headers"), *pair;
    size_t seen = 0;

    CHECK(asking == NULL || listed(asking, lname, lname_len),
        "the engine asked for header %.*s but does not list it", (int) lname_len,
        (const char *) lname);
    cJSON_ArrayForEach(pair, headers) {
        const cJSON *n = cJSON_GetArrayItem(pair, 0), *v = cJSON_GetArrayItem(pair, 1);
        if (!cJSON_IsString(n) || !cJSON_IsString(v)) {
            continue;
        }
        if (strlen(n->valuestring) == lname_len
            && strncasecmp(n->valuestring, (const char *) lname, lname_len) == 0
            && seen++ == nth)
        {
            *value = (const uint8_t *) v->valuestring;
            *value_len = strlen(v->valuestring);
            return 1;
        }
    }
    return 0;
}

/* Variable lookup over the step's "vars" object, by the engine's name for `index`. */
static int
json_var(void *ctx, size_t index, const uint8_t **value, size_t *value_len)
{
    const cJSON *vars = cJSON_GetObjectItem(ctx, "vars"), *v;
    const uint8_t *name;
    size_t len;

    if (asking == NULL || weir_engine_var_name(asking, index, &name, &len) != WEIR_OK) {
        CHECK(0, "the engine asked for variable %zu, which it does not list", index);
        return 0;
    }
    cJSON_ArrayForEach(v, vars) {
        if (cJSON_IsString(v) && strlen(v->string) == len && memcmp(v->string, name, len) == 0) {
            *value = (const uint8_t *) v->valuestring;
            *value_len = strlen(v->valuestring);
            return 1;
        }
    }
    return 0;
}

/* The indexes of the step's "select" list into `out`; -1 when the step has none. */
static int
selection(const weir_engine *e, const cJSON *step, uint16_t *out, int cap)
{
    const cJSON *names = cJSON_GetObjectItem(step, "select"), *n;
    int count = 0;

    if (!cJSON_IsArray(names)) {
        return -1;
    }
    cJSON_ArrayForEach(n, names) {
        size_t i, len;
        const uint8_t *name;
        for (i = 0; weir_engine_limit_name(e, i, &name, &len) == WEIR_OK; i++) {
            if (cJSON_IsString(n) && strlen(n->valuestring) == len
                && memcmp(n->valuestring, name, len) == 0)
            {
                break;
            }
        }
        CHECK(count < cap, "too many selected limits");
        if (count < cap) {
            out[count++] = (uint16_t) i;
        }
    }
    return count;
}

static const char *
action_name(int rc, const weir_verdict *v)
{
    if (rc == WEIR_ERR_BAD_TARGET) {
        return "bad_request";
    }
    if (v->exempt >= 0) {
        return "exempt";
    }
    switch (v->action) {
    case WEIR_PASS: return "pass";
    case WEIR_DELAY: return "delay";
    case WEIR_REJECT: return "reject";
    case WEIR_QUEUE: return "queue";
    }
    return "?";
}

/* Finds "Name: value\r\n" in the header block; returns a malloc'd value or NULL. */
static char *
find_header(const char *block, size_t len, const char *name)
{
    size_t nlen = strlen(name), i = 0;

    while (i < len) {
        const char *line = block + i;
        const char *end = memchr(line, '\r', len - i);
        if (end == NULL) {
            break;
        }
        if ((size_t) (end - line) > nlen + 1 && strncasecmp(line, name, nlen) == 0
            && line[nlen] == ':')
        {
            const char *v = line + nlen + 2;
            return strndup(v, (size_t) (end - v));
        }
        i = (size_t) (end - block) + 2;
    }
    return NULL;
}

static void
check_expect(const char *vname, int step, const cJSON *expect, const weir_engine *e, int rc,
    const weir_verdict *v, const char *hdrs)
{
    const cJSON *a = cJSON_GetObjectItem(expect, "action");
    const cJSON *st = cJSON_GetObjectItem(expect, "status");
    const cJSON *lim = cJSON_GetObjectItem(expect, "limit");
    const cJSON *wait = cJSON_GetObjectItem(expect, "wait_ms");
    const cJSON *hs = cJSON_GetObjectItem(expect, "headers");
    const cJSON *dry = cJSON_GetObjectItem(expect, "dry_run");
    const char *got = action_name(rc, v);

    if (cJSON_IsString(a)) {
        CHECK(strcmp(a->valuestring, got) == 0, "%s step %d: action %s, expected %s", vname,
            step, got, a->valuestring);
    }
    if (rc == WEIR_ERR_BAD_TARGET) {
        return;
    }
    if (cJSON_IsNumber(st)) {
        CHECK(v->status == st->valueint, "%s step %d: status %d, expected %d", vname, step,
            v->status, st->valueint);
    }
    if (lim != NULL) {
        const uint8_t *name = NULL;
        size_t len = 0;
        if (v->limit >= 0) {
            weir_engine_limit_name(e, (size_t) v->limit, &name, &len);
        }
        if (cJSON_IsNull(lim)) {
            CHECK(v->limit < 0, "%s step %d: limit %.*s, expected none", vname, step, (int) len,
                (const char *) name);
        } else if (cJSON_IsString(lim)) {
            CHECK(name != NULL && strlen(lim->valuestring) == len
                  && memcmp(name, lim->valuestring, len) == 0,
                "%s step %d: limit %.*s, expected %s", vname, step, (int) len,
                name ? (const char *) name : "", lim->valuestring);
        }
    }
    if (cJSON_IsNumber(wait)) {
        CHECK(v->wait_ns / MS == (uint64_t) wait->valuedouble,
            "%s step %d: wait %llu ms, expected %.0f", vname, step,
            (unsigned long long) (v->wait_ns / MS), wait->valuedouble);
    }
    if (dry != NULL) {
        const char *want = cJSON_IsString(dry) ? dry->valuestring : NULL;
        const char *have = v->dry_run_limit < 0 ? NULL
                           : v->dry_run_action == WEIR_REJECT ? "reject" : "delay";
        CHECK((want == NULL && have == NULL) || (want && have && strcmp(want, have) == 0),
            "%s step %d: dry_run %s, expected %s", vname, step, have ? have : "null",
            want ? want : "null");
    }
    if (cJSON_IsObject(hs)) {
        const cJSON *h;
        cJSON_ArrayForEach(h, hs) {
            char *val = find_header(hdrs, v->headers_len, h->string);
            if (cJSON_IsNull(h)) {
                CHECK(val == NULL, "%s step %d: header %s present (%s)", vname, step,
                    h->string, val);
            } else if (cJSON_IsString(h)) {
                CHECK(val != NULL && strcmp(val, h->valuestring) == 0,
                    "%s step %d: header %s = %s, expected %s", vname, step, h->string,
                    val ? val : "(absent)", h->valuestring);
            }
            free(val);
        }
    }
}

/* Every other vector passes its peers in binary too (weir_request.peer_ip). */
static int binary_peers;

static void
fill_request(weir_request *r, const cJSON *step)
{
    const cJSON *m = cJSON_GetObjectItem(step, "method");
    const cJSON *t = cJSON_GetObjectItem(step, "target");
    const cJSON *p = cJSON_GetObjectItem(step, "peer");

    memset(r, 0, sizeof(*r));
    r->method = (const uint8_t *) (cJSON_IsString(m) ? m->valuestring : "GET");
    r->method_len = strlen((const char *) r->method);
    r->target = (const uint8_t *) (cJSON_IsString(t) ? t->valuestring : "/");
    r->target_len = strlen((const char *) r->target);
    r->peer = (const uint8_t *) (cJSON_IsString(p) ? p->valuestring : "127.0.0.1");
    r->peer_len = strlen((const char *) r->peer);
    if (binary_peers) {
        /* as nginx passes it: the text and the same address in binary */
        if (inet_pton(AF_INET, (const char *) r->peer, r->peer_ip) == 1) {
            r->peer_ip_len = 4;
        } else if (inet_pton(AF_INET6, (const char *) r->peer, r->peer_ip) == 1) {
            r->peer_ip_len = 16;
        }
    }
    r->header = json_header;
    r->var = json_var;
    r->header_ctx = (void *) step;
}

static int
run_vector(const cJSON *vec)
{
    const char *name = cJSON_GetObjectItem(vec, "name")->valuestring;
    const cJSON *pol = cJSON_GetObjectItem(vec, "policy");
    const cJSON *steps = cJSON_GetObjectItem(vec, "steps"), *step;
    int n = cJSON_GetArraySize(steps), i = 0, before = failures;
    weir_policy *policy = NULL;
    weir_engine *engine = NULL;
    weir_error *err = NULL;
    weir_verdict *verdicts = calloc((size_t) n, sizeof(weir_verdict));
    const cJSON **reqs = calloc((size_t) n, sizeof(cJSON *));
    char hdrs[2048];

    if (weir_policy_parse((const uint8_t *) pol->valuestring, strlen(pol->valuestring), name,
            &policy, &err) != WEIR_OK
        || weir_engine_new(policy, &engine, &err) != WEIR_OK)
    {
        CHECK(0, "%s: %s", name, weir_error_message(err));
        goto done;
    }
    asking = engine;
    binary_peers = !binary_peers;
    listed_headers += weir_engine_header_count(engine);
    cJSON_ArrayForEach(step, steps) {
        const cJSON *t = cJSON_GetObjectItem(step, "t_ms");
        const cJSON *rel = cJSON_GetObjectItem(step, "release");
        const cJSON *retry = cJSON_GetObjectItem(step, "retry");
        const cJSON *abandon = cJSON_GetObjectItem(step, "abandon");
        const cJSON *expect = cJSON_GetObjectItem(step, "expect");
        uint64_t now = BASE_NS + (uint64_t) (cJSON_IsNumber(t) ? t->valuedouble : 0) * MS;
        weir_request r;
        uint16_t sel[32];
        int rc, nsel;

        if (cJSON_IsNumber(rel)) {
            const cJSON *st = cJSON_GetObjectItem(reqs[rel->valueint], "response_status");

            CHECK(weir_engine_charge(engine, &verdicts[rel->valueint],
                                     (uint16_t) (cJSON_IsNumber(st) ? st->valueint : 200), now)
                  == WEIR_OK, "%s: charge of step %d", name, rel->valueint);
            weir_engine_release(engine, &verdicts[rel->valueint], now);
        } else if (cJSON_IsNumber(abandon)) {
            weir_engine_abandon(engine, &verdicts[abandon->valueint], now);
        } else if (cJSON_IsNumber(retry)) {
            int k = retry->valueint;
            fill_request(&r, reqs[k]);
            nsel = selection(engine, reqs[k], sel, 32);
            hdrs[0] = '\0';
            rc = nsel < 0
                ? weir_engine_evaluate_queued(engine, &r, now, &verdicts[k], (uint8_t *) hdrs,
                    sizeof(hdrs))
                : weir_engine_evaluate_selected_queued(engine, &r, sel, (size_t) nsel, now,
                    &verdicts[k]);
            verdicts[i] = verdicts[k];
            memset(&verdicts[k], 0, sizeof(weir_verdict));
            verdicts[k].ticket.limit = -1;
            for (int j = 0; j < WEIR_MAX_PERMITS; j++) {
                verdicts[k].permits[j].limit = -1;
            }
            for (int j = 0; j < WEIR_MAX_CHARGES; j++) {
                verdicts[k].charges[j].limit = -1;
            }
            reqs[i] = reqs[k];
            if (expect) {
                check_expect(name, i, expect, engine, rc, &verdicts[i], hdrs);
            }
        } else {
            fill_request(&r, step);
            reqs[i] = step;
            nsel = selection(engine, step, sel, 32);
            hdrs[0] = '\0';
            rc = nsel < 0
                ? weir_engine_evaluate(engine, &r, now, &verdicts[i], (uint8_t *) hdrs,
                    sizeof(hdrs))
                : weir_engine_evaluate_selected(engine, &r, sel, (size_t) nsel, now,
                    &verdicts[i]);
            if (expect) {
                check_expect(name, i, expect, engine, rc, &verdicts[i], hdrs);
            }
        }
        i++;
    }
done:
    asking = NULL;
    free(verdicts);
    free(reqs);
    weir_error_free(err);
    weir_engine_free(engine);
    weir_policy_free(policy);
    return failures == before;
}

static char *
read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t) n + 1);
    if (fread(buf, 1, (size_t) n, f) != (size_t) n) {
        n = 0;
    }
    buf[n] = '\0';
    fclose(f);
    *len = (size_t) n;
    return buf;
}

static void
test_vectors(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int files = 0, vectors = 0, passed = 0;

    CHECK(d != NULL, "cannot open %s", dir);
    if (d == NULL) {
        return;
    }
    while ((de = readdir(d)) != NULL) {
        size_t len, nl = strlen(de->d_name);
        char path[4096];
        char *text;
        cJSON *doc, *list, *v;

        if (nl < 5 || strcmp(de->d_name + nl - 5, ".json") != 0) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        text = read_file(path, &len);
        doc = text ? cJSON_ParseWithLength(text, len) : NULL;
        CHECK(doc != NULL, "%s: cannot parse", path);
        files++;
        list = doc ? cJSON_GetObjectItem(doc, "vectors") : NULL;
        if (doc && list == NULL) {
            vectors++;
            passed += run_vector(doc);
        } else if (list) {
            cJSON_ArrayForEach(v, list) {
                vectors++;
                passed += run_vector(v);
            }
        }
        cJSON_Delete(doc);
        free(text);
    }
    closedir(d);
    printf("vectors: %d of %d passed (%d files)\n", passed, vectors, files);
    CHECK(vectors >= 60, "only %d vectors found in %s", vectors, dir);
    CHECK(listed_headers > 0, "no vector's engine listed a header it reads");
}

/* ---------------------------------------------------------------------------------------- */
/* Bad inputs: every one gives an error code, never a crash. */

/* Its exemption tests the path, so the engine reads (and checks) every target: a policy
 * that tests no path never parses it. */
static const char GOOD_POLICY[] =
    "[zones.ip]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n"
    "[exempt.health]\nmatch = [{ path = \"/healthz\" }]\n"
    "[[limit]]\nclass = \"*\"\nzone = \"ip\"\nburst = 1\nnodelay = true\n";

static void
test_bad_inputs(void)
{
    weir_policy *p = NULL;
    weir_engine *e = NULL;
    weir_error *err = NULL;
    weir_verdict v;
    weir_request r;
    weir_zone *z = NULL;
    weir_limiter *l = NULL;
    weir_check c;
    size_t written = 0;
    char buf[256];

    CHECK(strlen(weir_version()) > 0, "version");
    CHECK(weir_now_ns() > 0, "clock");

    /* NULL everywhere. */
    CHECK(weir_policy_parse(NULL, 10, NULL, &p, &err) == WEIR_ERR_NULL, "NULL text");
    weir_error_free(err);
    err = NULL;
    CHECK(weir_policy_parse((const uint8_t *) "x", 1, NULL, NULL, NULL) == WEIR_ERR_NULL,
        "NULL out");
    CHECK(weir_policy_load(NULL, &p, NULL) == WEIR_ERR_NULL, "NULL path");
    CHECK(weir_engine_new(NULL, &e, NULL) == WEIR_ERR_NULL, "NULL policy");
    CHECK(weir_engine_evaluate(NULL, NULL, 0, NULL, NULL, 0) == WEIR_ERR_NULL, "NULL engine");
    CHECK(weir_engine_release(NULL, NULL, 0) == WEIR_ERR_NULL, "NULL release");
    CHECK(weir_engine_prometheus(NULL, NULL, 0, NULL) == WEIR_ERR_NULL, "NULL prometheus");
    CHECK(weir_zone_check(NULL, NULL, NULL, 0, 1, 0, NULL) == WEIR_ERR_NULL, "NULL zone");
    CHECK(weir_zone_attach(NULL, 4096, 1, 0, NULL, &z, NULL) == WEIR_ERR_NULL, "NULL region");
    CHECK(weir_policy_zone_count(NULL) == 0, "NULL zone count");
    CHECK(weir_log_zone_bytes(10, 1000) > 1000 * 80, "log zone bytes");
    CHECK(weir_log_zone_bytes(0, 1000) == 0, "log zone of 0 events");
    CHECK(weir_log_zone_bytes(10, SIZE_MAX) == 0, "log zone size overflow");
    CHECK(weir_engine_limit_count(NULL) == 0, "NULL limit count");
    CHECK(weir_engine_fails_closed(NULL) == 0, "NULL fails closed");
    CHECK(strcmp(weir_error_message(NULL), "") == 0, "NULL error message");
    weir_policy_free(NULL);
    weir_engine_free(NULL);
    weir_zone_free(NULL);
    weir_limiter_free(NULL);
    weir_error_free(NULL);

    /* Huge lengths are refused before any read. */
    CHECK(weir_policy_parse((const uint8_t *) "x", (size_t) 1 << 40, NULL, &p, &err)
          == WEIR_ERR_NULL || err != NULL, "huge length");
    weir_error_free(err);
    err = NULL;

    /* Broken policies: truncated, garbage, invalid UTF-8, empty. */
    {
        const char *bad[] = { "[zones.ip]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/",
                              "\x01\x02garbage\xff\xfe", "[[limit]]\nclass = 1\n",
                              "[zones.a]\nsize=\"1k\"\nalgorithm=\"gcra\"\nrate=\"5r/w\"\n" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            CHECK(weir_policy_parse((const uint8_t *) bad[i], strlen(bad[i]), "bad.toml", &p,
                      &err) == WEIR_ERR_POLICY && p == NULL && err != NULL,
                "bad policy %zu accepted", i);
            if (i == 3) {
                CHECK(strstr(weir_error_message(err), "bad.toml:4:") != NULL,
                    "error without file:line: %s", weir_error_message(err));
            }
            weir_error_free(err);
            err = NULL;
        }
        /* Every prefix of a good policy: either parses or fails cleanly. */
        for (size_t n = 0; n <= sizeof(GOOD_POLICY) - 1; n++) {
            int rc = weir_policy_parse((const uint8_t *) GOOD_POLICY, n, NULL, &p, &err);
            CHECK(rc == WEIR_OK || rc == WEIR_ERR_POLICY, "prefix %zu gave %d", n, rc);
            weir_policy_free(p);
            weir_error_free(err);
            p = NULL;
            err = NULL;
        }
    }
    CHECK(weir_policy_load("/nonexistent/weir.toml", &p, &err) == WEIR_ERR_IO, "missing file");
    weir_error_free(err);
    err = NULL;

    /* A working engine, then bad requests against it. */
    CHECK(weir_policy_parse((const uint8_t *) GOOD_POLICY, strlen(GOOD_POLICY), "good", &p,
              &err) == WEIR_OK, "good policy: %s", weir_error_message(err));
    CHECK(weir_engine_new(p, &e, &err) == WEIR_OK, "engine");
    CHECK(weir_engine_fails_closed(e) == 0, "failure_mode defaults to open");
    CHECK(weir_engine_limit_log_level(e, 0) == 3 && weir_engine_limit_log_level(e, 9) == -1
          && weir_engine_limit_log_level(NULL, 0) == -1, "log level");
    memset(&r, 0, sizeof(r));
    r.method = (const uint8_t *) "GET";
    r.method_len = 3;
    r.target = (const uint8_t *) "/";
    r.target_len = 1;
    r.peer = (const uint8_t *) "192.0.2.1";
    r.peer_len = 9;
    CHECK(weir_engine_evaluate(e, &r, weir_now_ns(), &v, NULL, 0) == WEIR_OK, "plain request");
    CHECK(weir_engine_evaluate(e, NULL, 0, &v, NULL, 0) == WEIR_ERR_NULL, "NULL request");
    CHECK(weir_engine_evaluate(e, &r, 0, NULL, NULL, 0) == WEIR_ERR_NULL, "NULL verdict");
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 10) == WEIR_ERR_NULL, "NULL header buffer");
    r.target = NULL;
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_ERR_NULL, "NULL target");
    r.target = (const uint8_t *) "/";
    r.target_len = 0;
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_ERR_BAD_TARGET, "empty target");
    r.target_len = (size_t) 1 << 40;
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_ERR_INVALID, "huge target");
    r.target_len = 1;
    r.peer = (const uint8_t *) "not-an-ip";
    r.peer_len = 9;
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_ERR_INVALID, "bad peer");
    r.peer = (const uint8_t *) "\xff\xfe";
    r.peer_len = 2;
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_ERR_INVALID, "non-UTF-8 peer");
    /* No IP peer (a unix-domain socket): evaluated as the local client. */
    r.peer = NULL;
    r.peer_len = 0;
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_OK, "peer length 0");
    r.peer = (const uint8_t *) "unix:";
    r.peer_len = 5;
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_OK, "unix: peer");
    /* A binary peer is read instead of the text; only 4 and 16 bytes are addresses. */
    r.peer = (const uint8_t *) "not-an-ip";
    r.peer_len = 9;
    r.peer_ip_len = 4;
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_OK, "binary IPv4 peer");
    r.peer_ip_len = 16;
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_OK, "binary IPv6 peer");
    r.peer_ip_len = 5;
    memset(&v, 0xab, sizeof(v));
    CHECK(weir_engine_evaluate(e, &r, 0, &v, NULL, 0) == WEIR_ERR_INVALID, "peer_ip_len 5");
    CHECK(v.action == WEIR_PASS && v.limit == -1 && v.permits[0].limit == -1
          && v.charges[0].limit == -1, "a verdict is written on errors too");
    r.peer_ip_len = 0;
    r.peer = (const uint8_t *) "2001:db8::1";
    r.peer_len = 11;
    {
        /* A 64 KiB target, and invalid UTF-8 / bad escapes in targets. */
        size_t big = 65536;
        char *t = malloc(big);
        memset(t, 'a', big);
        t[0] = '/';
        r.target = (const uint8_t *) t;
        r.target_len = big;
        CHECK(weir_engine_evaluate(e, &r, weir_now_ns(), &v, NULL, 0) == WEIR_OK, "64 KiB");
        free(t);
        r.target = (const uint8_t *) "/\xc3\x28\xff";
        r.target_len = 4;
        CHECK(weir_engine_evaluate(e, &r, weir_now_ns(), &v, NULL, 0) == WEIR_OK,
            "invalid UTF-8 in target passes through as nginx does");
        r.target = (const uint8_t *) "/%zz";
        r.target_len = 4;
        CHECK(weir_engine_evaluate(e, &r, weir_now_ns(), &v, NULL, 0) == WEIR_ERR_BAD_TARGET
              && v.status == 400, "bad escape");
        r.target = (const uint8_t *) "/../x";
        r.target_len = 5;
        CHECK(weir_engine_evaluate(e, &r, weir_now_ns(), &v, NULL, 0) == WEIR_ERR_BAD_TARGET,
            "above root");
    }
    /* A header buffer too small: verdict still valid, truncation flagged. */
    r.target = (const uint8_t *) "/x";
    r.target_len = 2;
    r.peer = (const uint8_t *) "198.51.100.1";
    r.peer_len = 12;
    for (int i = 0; i < 3; i++) {
        CHECK(weir_engine_evaluate(e, &r, BASE_NS, &v, (uint8_t *) buf, 4) == WEIR_OK, "small");
    }
    CHECK(v.action == WEIR_REJECT && v.headers_truncated == 1 && v.headers_len == 0,
        "truncated headers: action %d truncated %d", v.action, v.headers_truncated);
    CHECK(weir_engine_prometheus(e, (uint8_t *) buf, 8, &written) == WEIR_ERR_BUFFER_TOO_SMALL
          && written > 8, "prometheus too small");
    {
        char *text = malloc(written + 1);
        CHECK(weir_engine_prometheus(e, (uint8_t *) text, written, &written) == WEIR_OK,
            "prometheus");
        text[written] = '\0';
        CHECK(strstr(text, "weir_limit_requests_total{limit=") != NULL, "metrics text");
        free(text);
    }
    CHECK(weir_engine_json(NULL, NULL, 0, &written) == WEIR_ERR_NULL, "NULL json");
    {
        const weir_engine *one[1] = { e };
        CHECK(weir_metrics(one, 1, 7, NULL, 0, &written) == WEIR_ERR_INVALID, "format 7");
    }
    CHECK(weir_engine_json(e, (uint8_t *) buf, 8, &written) == WEIR_ERR_BUFFER_TOO_SMALL
          && written > 8, "json too small");
    {
        char *text = malloc(written + 1);
        CHECK(weir_engine_json(e, (uint8_t *) text, written, &written) == WEIR_OK, "json");
        text[written] = '\0';
        CHECK(strncmp(text, "{\"version\":2,\"engine\":{\"requests\":", 32) == 0
              && strstr(text, "\"limits\":[{\"name\":") != NULL
              && text[written - 1] == '}', "json status: %s", text);
        free(text);
    }
    {
        const weir_engine *one[1] = { e };
        const char        *hn, *hv;
        size_t             i;

        CHECK(weir_metrics(one, 1, WEIR_FORMAT_HTML, NULL, 0, &written)
              == WEIR_ERR_BUFFER_TOO_SMALL && written > 1000, "page size");
        CHECK(weir_page_header(0, NULL, &hv) == WEIR_ERR_NULL, "page header NULL");
        CHECK(weir_page_header(0, &hn, &hv) == WEIR_OK
              && strcmp(hn, "Content-Security-Policy") == 0
              && strncmp(hv, "default-src 'none'", 18) == 0, "page policy");
        for (i = 1; weir_page_header(i, &hn, &hv) == WEIR_OK; i++) {
            CHECK(*hn != '\0' && *hv != '\0', "page header %zu", i);
        }
        CHECK(i == 5, "page headers: %zu", i);
    }
    CHECK(weir_engine_header_count(e) == 0, "GOOD_POLICY reads no header");
    CHECK(weir_engine_header_count(NULL) == 0, "NULL header count");
    CHECK(weir_engine_header_name(NULL, 0, NULL, NULL) == WEIR_ERR_NULL, "header name NULL");
    {
        const uint8_t *nm;
        size_t nl;
        CHECK(weir_engine_header_name(e, 0, &nm, &nl) == WEIR_ERR_INVALID, "header 0");
    }
    CHECK(weir_engine_limit_name(e, 99, NULL, NULL) == WEIR_ERR_NULL, "limit name NULL");
    {
        const uint8_t *nm;
        size_t nl;
        CHECK(weir_engine_limit_name(e, 99, &nm, &nl) == WEIR_ERR_INVALID, "limit 99");
    }
    weir_engine_free(e);
    weir_policy_free(p);

    /* Low-level zone misuse. */
    CHECK(weir_zone_new(10, 1, &z, &err) == WEIR_ERR_ZONE && z == NULL, "tiny zone");
    weir_error_free(err);
    err = NULL;
    CHECK(weir_limiter_gcra(0, 1000000000, 0, 0, &l, &err) == WEIR_ERR_INVALID, "zero rate");
    weir_error_free(err);
    err = NULL;
    CHECK(weir_limiter_sliding(5, 10, &l, &err) == WEIR_ERR_INVALID, "tiny window");
    weir_error_free(err);
    err = NULL;
    CHECK(weir_zone_new(1 << 16, 1, &z, NULL) == WEIR_OK, "zone");
    CHECK(weir_limiter_concurrency(1, 0, &l, NULL) == WEIR_OK, "concurrency limiter");
    CHECK(weir_zone_check(z, l, (const uint8_t *) "k", 1, 1, 0, &c) == WEIR_ERR_INVALID,
        "check with a concurrency limiter");
    {
        weir_permit pm;
        uint64_t now = BASE_NS;
        CHECK(weir_zone_acquire(z, l, (const uint8_t *) "k", 1, now, &c, &pm) == WEIR_OK
              && c.action == WEIR_PASS, "acquire");
        CHECK(weir_zone_in_flight(z, l, (const uint8_t *) "k", 1, now) == 1, "in flight 1");
        CHECK(weir_zone_release(z, l, &pm, now) == WEIR_OK, "release");
        CHECK(weir_zone_release(z, l, &pm, now) == WEIR_OK, "second release is a no-op");
        CHECK(weir_zone_in_flight(z, l, (const uint8_t *) "k", 1, now) == 0, "in flight 0");
    }
    {
        /* A misaligned region is refused. */
        void *region = aligned_alloc(64, 1 << 16);
        weir_zone *z2 = NULL;
        CHECK(weir_zone_attach((char *) region + 8, (1 << 16) - 64, 1, 0, NULL, &z2, &err)
              == WEIR_ERR_ZONE && z2 == NULL, "misaligned region");
        weir_error_free(err);
        err = NULL;
        free(region);
    }
    weir_zone_free(z);
    weir_limiter_free(l);
}

/* ---------------------------------------------------------------------------------------- */
/* Several processes over one MAP_SHARED region: the admitted count is exact. */

#define PROCS 4
#define PER_PROC 5000
#define BURST 999

static void
test_fork_shared_region(void)
{
    size_t bytes = 1 << 20;
    void *region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    _Atomic uint64_t *admitted = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    weir_zone *z = NULL;
    weir_limiter *l = NULL;
    weir_zone_stats stats;
    int existed = -1;
    pid_t pids[PROCS];

    CHECK(region != MAP_FAILED && admitted != MAP_FAILED, "mmap");
    CHECK(weir_zone_attach(region, bytes, 42, 0, &existed, &z, NULL) == WEIR_OK
          && existed == 0, "create zone");
    CHECK(weir_limiter_gcra(10, 1000000000, BURST, -1, &l, NULL) == WEIR_OK, "limiter");

    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            weir_zone *mine = NULL;
            weir_check c;
            int ex = -1;
            if (weir_zone_attach(region, bytes, 42, 0, &ex, &mine, NULL) != WEIR_OK || ex != 1) {
                _exit(2);
            }
            for (int i = 0; i < PER_PROC; i++) {
                if (weir_zone_check(mine, l, (const uint8_t *) "hot", 3, 1, BASE_NS, &c)
                        == WEIR_OK && c.action == WEIR_PASS)
                {
                    atomic_fetch_add(admitted, 1);
                }
            }
            weir_zone_free(mine);
            _exit(0);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int status = 0;
        waitpid(pids[p], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed", p);
    }
    CHECK(atomic_load(admitted) == BURST + 1, "admitted %llu, expected %d",
        (unsigned long long) atomic_load(admitted), BURST + 1);
    CHECK(weir_zone_get_stats(z, &stats) == WEIR_OK && stats.passed == BURST + 1
          && stats.rejected == (uint64_t) PROCS * PER_PROC - (BURST + 1), "stats");
    /* A reattach with another schema or size is refused. */
    {
        weir_zone *other = NULL;
        weir_error *err = NULL;
        CHECK(weir_zone_attach(region, bytes, 43, 0, NULL, &other, &err) == WEIR_ERR_ZONE
              && strstr(weir_error_message(err), "schema") != NULL, "schema change");
        weir_error_free(err);
        err = NULL;
        CHECK(weir_zone_attach(region, bytes / 2, 42, 0, NULL, &other, &err) == WEIR_ERR_ZONE,
            "size change");
        weir_error_free(err);
    }
    weir_zone_free(z);
    weir_limiter_free(l);
    munmap(region, bytes);
    munmap((void *) admitted, 4096);
}

/* The same through engines attached to regions (how the nginx module shares policy zones). */
static void
test_fork_engine_regions(void)
{
    static const char pol[] =
        "[zones.g]\nsize = \"256k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n"
        "[[limit]]\nname = \"site\"\nclass = \"*\"\nzone = \"g\"\nkey = \"global\"\n"
        "burst = 49\nnodelay = true\n";
    weir_policy *p = NULL;
    weir_zone_info info;
    weir_region reg, cnt;
    _Atomic uint64_t *admitted = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pids[PROCS];

    CHECK(weir_policy_parse((const uint8_t *) pol, strlen(pol), "fork", &p, NULL) == WEIR_OK,
        "policy");
    CHECK(weir_policy_zone_count(p) == 1 && weir_policy_zone(p, 0, &info) == WEIR_OK, "zone");
    reg.len = info.bytes;
    reg.ptr = mmap(NULL, reg.len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cnt.len = weir_policy_counters_bytes(p);
    cnt.ptr = mmap(NULL, cnt.len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(cnt.len > 0, "counters bytes");
    {
        weir_engine *e = NULL;
        CHECK(weir_engine_attach(p, &reg, 1, &cnt, 0, &e, NULL) == WEIR_OK,
            "create in region");
        weir_engine_free(e);
    }
    for (int k = 0; k < PROCS; k++) {
        pids[k] = fork();
        if (pids[k] == 0) {
            weir_engine *e = NULL;
            weir_request r;
            weir_verdict v;
            if (weir_engine_attach(p, &reg, 1, &cnt, 0, &e, NULL) != WEIR_OK) {
                _exit(2);
            }
            memset(&r, 0, sizeof(r));
            r.method = (const uint8_t *) "GET";
            r.method_len = 3;
            r.target = (const uint8_t *) "/page";
            r.target_len = 5;
            r.peer = (const uint8_t *) "192.0.2.9";
            r.peer_len = 9;
            for (int i = 0; i < 1000; i++) {
                if (weir_engine_evaluate(e, &r, BASE_NS, &v, NULL, 0) == WEIR_OK
                    && v.action == WEIR_PASS)
                {
                    atomic_fetch_add(admitted, 1);
                }
            }
            weir_engine_free(e);
            _exit(0);
        }
    }
    for (int k = 0; k < PROCS; k++) {
        int status = 0;
        waitpid(pids[k], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "engine child %d failed", k);
    }
    CHECK(atomic_load(admitted) == 50, "engine admitted %llu, expected 50",
        (unsigned long long) atomic_load(admitted));
    {
        /* The shared counter block saw every process's verdicts. */
        weir_engine *e = NULL;
        weir_limit_counters lc;
        CHECK(weir_engine_attach(p, &reg, 1, &cnt, 0, &e, NULL) == WEIR_OK, "reattach");
        CHECK(weir_engine_limit_counters(e, 0, &lc) == WEIR_OK && lc.passed == 50
              && lc.rejected == PROCS * 1000 - 50,
            "shared counters: passed %llu rejected %llu", (unsigned long long) lc.passed,
            (unsigned long long) lc.rejected);
        weir_engine_free(e);
    }
    weir_policy_free(p);
    munmap(reg.ptr, reg.len);
    munmap(cnt.ptr, cnt.len);
    munmap((void *) admitted, 4096);
}

/* A cluster zone's shared region through the C ABI: sized by weir_policy_zone, syncers
 * deferred and started later, their messages queued for the host (Redis here is a closed
 * port, so the syncer reports a failed sync). */
static void
test_cluster_region(void)
{
    static const char pol[] =
        "[zones.c]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 100\nwindow = \"1s\"\n"
        "scope = \"cluster\"\nredis = \"redis://127.0.0.1:1/0\"\nsync_interval = \"20ms\"\n"
        "expected_nodes = 2\n"
        "[zones.l]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n"
        "[[limit]]\nname = \"c\"\nclass = \"*\"\nzone = \"c\"\nkey = \"global\"\n";
    weir_policy *p = NULL;
    weir_zone_info zc, zl;
    weir_region reg[2], cl[2];
    weir_engine *e = NULL;
    weir_error *err = NULL;
    uint8_t buf[256];
    size_t n = 0;

    CHECK(weir_policy_parse((const uint8_t *) pol, strlen(pol), "cluster", &p, NULL) == WEIR_OK,
        "cluster policy");
    CHECK(weir_policy_zone(p, 0, &zc) == WEIR_OK && weir_policy_zone(p, 1, &zl) == WEIR_OK,
        "zones");
    CHECK(zc.cluster_bytes > 2 * zc.bytes && zl.cluster_bytes == 0, "cluster_bytes %zu / %zu",
        zc.cluster_bytes, zl.cluster_bytes);
    for (int i = 0; i < 2; i++) {
        reg[i].len = i ? zl.bytes : zc.bytes;
        reg[i].ptr = mmap(NULL, reg[i].len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
            -1, 0);
    }
    cl[0].len = zc.cluster_bytes;
    cl[0].ptr = mmap(NULL, cl[0].len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    /* a cluster region for a local zone is refused */
    cl[1] = cl[0];
    CHECK(weir_engine_attach_shared(p, reg, 2, cl, NULL, 0, WEIR_ATTACH_DEFER_SYNC, &e, NULL)
          == WEIR_ERR_INVALID && e == NULL, "cluster region for a local zone");
    cl[1].ptr = NULL;
    cl[1].len = 0;
    /* too small */
    cl[0].len--;
    CHECK(weir_engine_attach_shared(p, reg, 2, cl, NULL, 0, 0, &e, &err) == WEIR_ERR_ZONE,
        "small cluster region");
    weir_error_free(err);
    cl[0].len++;
    weir_cluster_log_queue();
    CHECK(weir_engine_attach_shared(p, reg, 2, cl, NULL, 0, WEIR_ATTACH_DEFER_SYNC, &e, NULL)
          == WEIR_OK, "attach_shared");
    /* deferred: nothing syncs (or logs) before weir_engine_start_sync */
    usleep(100 * 1000);
    CHECK(weir_cluster_log_pop(buf, sizeof(buf)) == 0, "a message before the syncer started");
    CHECK(weir_engine_start_sync(e, NULL) == WEIR_OK, "start_sync");
    CHECK(weir_engine_start_sync(e, NULL) == WEIR_OK, "start_sync twice");
    for (int i = 0; i < 200 && n == 0; i++) {
        usleep(10 * 1000);
        n = weir_cluster_log_pop(buf, sizeof(buf));
    }
    CHECK(n > 0 && memmem(buf, n, "sync failed", 11) != NULL, "no 'sync failed' message: %.*s",
        (int) n, buf);
    CHECK(weir_cluster_log_pop(buf, 0) == 0 && weir_cluster_log_pop(NULL, 8) == 0, "pop args");
    weir_engine_stop_sync(e);
    weir_engine_stop_sync(NULL);
    CHECK(weir_engine_start_sync(NULL, NULL) == WEIR_ERR_NULL, "start_sync NULL");
    weir_engine_free(e);
    while (weir_cluster_log_pop(buf, sizeof(buf)) > 0) {
    }
    weir_policy_free(p);
    for (int i = 0; i < 2; i++) {
        munmap(reg[i].ptr, reg[i].len);
    }
    munmap(cl[0].ptr, cl[0].len);
}

/* ---------------------------------------------------------------------------------------- */
/* Misuse of permits, tickets and the header callback: refused quietly, never counted twice. */

/* Runs around a call: `quiet_begin` sends stderr to a temporary file, `quiet_end` restores it
 * and returns how many bytes were written meanwhile. */
static FILE *quiet_file;
static int quiet_saved = -1;

static void
quiet_begin(void)
{
    fflush(stderr);
    quiet_file = tmpfile();
    quiet_saved = dup(2);
    dup2(fileno(quiet_file), 2);
}

static long
quiet_end(void)
{
    long n;

    fflush(stderr);
    dup2(quiet_saved, 2);
    close(quiet_saved);
    fseek(quiet_file, 0, SEEK_END);
    n = ftell(quiet_file);
    fclose(quiet_file);
    return n;
}

/* A header callback that has a value for every occurrence asked for (a broken host). */
static size_t endless_calls;

static int
endless_header(void *ctx, const uint8_t *lname, size_t lname_len, size_t nth,
    const uint8_t **value, size_t *value_len)
{
    (void) ctx;
    (void) lname;
    (void) lname_len;
    (void) nth;
    if (++endless_calls > 100000) {
        return 0; /* give the engine a way out, so a missing bound fails instead of hanging */
    }
    *value = (const uint8_t *) "203.0.113.9";
    *value_len = 11;
    return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* Value syntaxes: the policy's parsers for hosts */

/* Parses `text` with weir_parse_rate into *r; the message goes to err (cap bytes). */
static int
rate_of(const char *text, weir_rate *r, char *err, size_t cap)
{
    return weir_parse_rate((const uint8_t *) text, strlen(text), r, err, cap);
}

/* The error a policy whose zone says `rate = "<rate>"` gets, after its "name:line:col: ". */
static void
policy_rate_error(const char *rate, char *msg, size_t cap)
{
    char toml[256];
    weir_policy *p = NULL;
    weir_error *e = NULL;
    int n = snprintf(toml, sizeof toml,
                     "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"%s\"\n"
                     "[[limit]]\nclass = \"*\"\nzone = \"z\"\n", rate);
    int rc = weir_policy_parse((const uint8_t *) toml, (size_t) n, "p.toml", &p, &e);
    CHECK(rc == WEIR_ERR_POLICY, "policy with rate %s: %d", rate, rc);
    snprintf(msg, cap, "%s", weir_error_message(e));
    weir_error_free(e);
    weir_policy_free(p);
}

static void
test_parse_values(void)
{
    weir_rate r;
    uint64_t v;
    char err[256], toml_err[512];

    /* Good values: every rate unit (nginx's r/s and r/m among them), sizes, durations. */
    CHECK(rate_of("10r/s", &r, err, sizeof err) == WEIR_OK && r.count == 10
          && r.period_ns == 1000000000ULL && err[0] == '\0', "10r/s: %s", err);
    CHECK(rate_of("30r/m", &r, err, sizeof err) == WEIR_OK && r.period_ns == 60000000000ULL,
          "30r/m");
    CHECK(rate_of("100r/h", &r, err, sizeof err) == WEIR_OK && r.period_ns == 3600000000000ULL,
          "100r/h");
    CHECK(rate_of("1000r/d", &r, err, sizeof err) == WEIR_OK && r.count == 1000
          && r.period_ns == 86400000000000ULL, "1000r/d");
    CHECK(weir_parse_size((const uint8_t *) "512k", 4, &v, err, sizeof err) == WEIR_OK
          && v == 512 << 10, "512k");
    CHECK(weir_parse_size((const uint8_t *) "65536", 5, &v, NULL, 0) == WEIR_OK && v == 65536,
          "65536");
    CHECK(weir_parse_size((const uint8_t *) "1G", 2, &v, NULL, 0) == WEIR_OK && v == 1ULL << 30,
          "1G");
    CHECK(weir_parse_duration((const uint8_t *) "1h30m", 5, &v, err, sizeof err) == WEIR_OK
          && v == 5400000000000ULL, "1h30m");
    CHECK(weir_parse_duration((const uint8_t *) "500ms", 5, &v, NULL, 0) == WEIR_OK
          && v == 500000000ULL, "500ms");
    CHECK(weir_parse_duration((const uint8_t *) "90", 2, &v, NULL, 0) == WEIR_OK
          && v == 90000000000ULL, "a bare number is seconds");
    /* Only `len` bytes count: "10r/sXYZ" cut to 5 is 10r/s. */
    CHECK(weir_parse_rate((const uint8_t *) "10r/sXYZ", 5, &r, NULL, 0) == WEIR_OK
          && r.count == 10, "len bounds the text");

    /* Each kind of bad rate gets the policy loader's words. */
    const char *bad_rates[] = {"r/s", "10/s", "10r/w", "0r/s", "2000000000r/s", "", " 10r/s"};
    for (size_t i = 0; i < sizeof bad_rates / sizeof bad_rates[0]; i++) {
        memset(&r, 0xab, sizeof r);
        int rc = rate_of(bad_rates[i], &r, err, sizeof err);
        CHECK(rc == WEIR_ERR_INVALID && err[0] != '\0', "rate \"%s\": %d", bad_rates[i], rc);
        CHECK(r.count == 0xababababababababULL, "rate \"%s\": out written", bad_rates[i]);
        policy_rate_error(bad_rates[i], toml_err, sizeof toml_err);
        const char *words = strstr(toml_err, err);
        CHECK(words != NULL && strlen(words) == strlen(err),
              "rate \"%s\": \"%s\" does not end the policy's \"%s\"", bad_rates[i], err,
              toml_err);
    }
    CHECK(rate_of("10r/w", &r, err, sizeof err) == WEIR_ERR_INVALID
          && strcmp(err, "unknown rate unit \"r/w\"; expected r/s, r/m, r/h or r/d") == 0,
          "10r/w: %s", err);
    CHECK(rate_of("0r/s", &r, err, sizeof err) == WEIR_ERR_INVALID
          && strstr(err, "admits nothing") != NULL, "0r/s: %s", err);
    CHECK(rate_of("2000000000r/s", &r, err, sizeof err) == WEIR_ERR_INVALID
          && strstr(err, "too high") != NULL, "too high: %s", err);

    /* Bad sizes and durations: no number, an unknown unit, too large, units out of order. */
    const char *bad_sizes[] = {"m", "10mb", "-1", "99999999999999999999", "17179869184g"};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        int rc = weir_parse_size((const uint8_t *) bad_sizes[i], strlen(bad_sizes[i]), &v, err,
                                 sizeof err);
        CHECK(rc == WEIR_ERR_INVALID && err[0] != '\0', "size \"%s\": %d", bad_sizes[i], rc);
    }
    CHECK(weir_parse_size((const uint8_t *) "10mb", 4, &v, err, sizeof err) == WEIR_ERR_INVALID
          && strcmp(err, "unknown size unit \"mb\"; expected k, m or g (or none for bytes)") == 0,
          "10mb: %s", err);
    const char *bad_durations[] = {"", "h", "5x", "30m1h", "1m1m", "1.5s", "500000000y"};
    for (size_t i = 0; i < sizeof bad_durations / sizeof bad_durations[0]; i++) {
        int rc = weir_parse_duration((const uint8_t *) bad_durations[i],
                                     strlen(bad_durations[i]), &v, err, sizeof err);
        CHECK(rc == WEIR_ERR_INVALID && err[0] != '\0', "duration \"%s\": %d", bad_durations[i],
              rc);
    }
    CHECK(weir_parse_duration((const uint8_t *) "5x", 2, &v, err, sizeof err) == WEIR_ERR_INVALID
          && strcmp(err, "unknown time unit \"x\"; expected ms, s, m, h, d, w, M or y") == 0,
          "5x: %s", err);
    /* Bytes that are not UTF-8 are refused, not read as text. */
    CHECK(weir_parse_rate((const uint8_t *) "1\xffr/s", 5, &r, err, sizeof err)
          == WEIR_ERR_INVALID, "bad UTF-8");

    /* NULL pointers: the text (with a length), out, the error buffer (with a capacity). */
    CHECK(weir_parse_rate(NULL, 5, &r, err, sizeof err) == WEIR_ERR_NULL && err[0] != '\0',
          "NULL text: %s", err);
    CHECK(weir_parse_rate(NULL, 0, &r, err, sizeof err) == WEIR_ERR_INVALID,
          "NULL empty text is the empty text");
    CHECK(weir_parse_rate((const uint8_t *) "1r/s", 4, NULL, err, sizeof err) == WEIR_ERR_NULL,
          "NULL out");
    CHECK(weir_parse_size((const uint8_t *) "1", 1, NULL, NULL, 0) == WEIR_ERR_NULL, "NULL out");
    CHECK(weir_parse_duration((const uint8_t *) "1s", 2, NULL, NULL, 0) == WEIR_ERR_NULL,
          "NULL out");
    CHECK(weir_parse_rate((const uint8_t *) "1r/s", 4, &r, NULL, 16) == WEIR_ERR_NULL,
          "NULL error buffer with a capacity");
    CHECK(weir_parse_rate((const uint8_t *) "x", 1, &r, NULL, 0) == WEIR_ERR_INVALID,
          "no error buffer");

    /* Short error buffers: cut to fit, NUL-terminated, never written past cap. */
    char small[8];
    memset(small, 'Z', sizeof small);
    CHECK(rate_of("x", &r, small, 5) == WEIR_ERR_INVALID && strcmp(small, "inva") == 0
          && small[5] == 'Z', "cut to 5: \"%.8s\"", small);
    CHECK(rate_of("x", &r, small, 1) == WEIR_ERR_INVALID && small[0] == '\0', "cut to 1");
    memset(small, 'Z', sizeof small);
    CHECK(rate_of("x", &r, small, 0) == WEIR_ERR_INVALID && small[0] == 'Z', "cap 0");
}

/* charge_on_status: 401s are charged, 200s never; a copy of a charged verdict charges
 * nothing; a forged charge (a limit that is none, or a made-up generation) and another
 * engine's verdict are refused without a charge or a word on stderr. */
static void
test_charge_on_status(void)
{
    static const char policy[] =
        "[zones.f]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 2\nwindow = \"1m\"\n"
        "[[limit]]\nclass = \"*\"\nzone = \"f\"\ncharge_on_status = [401]\n";
    weir_policy *p = NULL;
    weir_engine *e = NULL, *other = NULL;
    weir_verdict v, copy;
    weir_request r;
    uint64_t now = BASE_NS;
    long noise;
    int rc;

    CHECK(weir_policy_parse((const uint8_t *) policy, strlen(policy), "c", &p, NULL) == WEIR_OK
          && weir_engine_new(p, &e, NULL) == WEIR_OK
          && weir_engine_new(p, &other, NULL) == WEIR_OK, "charge_on_status engines");
    r = (weir_request) { .method = (const uint8_t *) "POST", .method_len = 4,
                         .target = (const uint8_t *) "/login", .target_len = 6,
                         .peer = (const uint8_t *) "192.0.2.1", .peer_len = 9 };
    CHECK(weir_engine_charge(NULL, NULL, 401, now) == WEIR_ERR_NULL, "NULL charge");
    for (int i = 0; i < 5; i++) {
        CHECK(weir_engine_evaluate(e, &r, now, &v, NULL, 0) == WEIR_OK
              && v.action == WEIR_PASS && v.charges[0].limit == 0
              && v.charges[1].limit == -1, "200 %d passes with its charge", i);
        CHECK(weir_engine_charge(e, &v, 200, now) == WEIR_OK && v.charges[0].limit == -1,
              "200 charges nothing and clears");
    }
    CHECK(weir_engine_evaluate(e, &r, now, &v, NULL, 0) == WEIR_OK, "first 401");
    copy = v;
    CHECK(weir_engine_charge(e, &v, 401, now) == WEIR_OK, "charge");
    CHECK(weir_engine_charge(e, &copy, 401, now) == WEIR_OK, "charge of a copy");
    CHECK(weir_engine_evaluate(e, &r, now, &v, NULL, 0) == WEIR_OK && v.action == WEIR_PASS,
          "the copy charged nothing");
    copy = v;
    copy.charges[0].limit = 3;
    quiet_begin();
    rc = weir_engine_charge(e, &copy, 401, now);
    noise = quiet_end();
    CHECK(rc == WEIR_ERR_INVALID && noise == 0 && copy.charges[0].limit == 3,
          "forged charge: rc %d, %ld bytes on stderr", rc, noise);
    /* limit 0 and the key's hash, generation 0; then the right generation on another
     * engine: refused three times each, and the key is not charged (below) */
    for (int i = 0; i < 3; i++) {
        copy = v;
        copy.charges_generation = 0;
        rc = weir_engine_charge(e, &copy, 401, now);
        CHECK(rc == WEIR_ERR_INVALID && copy.charges[0].limit == 0,
              "charge of generation 0: rc %d", rc);
        copy = v;
        rc = weir_engine_charge(other, &copy, 401, now);
        CHECK(rc == WEIR_ERR_INVALID && copy.charges[0].limit == 0,
              "charge on another engine: rc %d", rc);
    }
    CHECK(weir_engine_evaluate(other, &r, now, &copy, NULL, 0) == WEIR_OK
          && copy.action == WEIR_PASS, "the other engine was charged nothing");
    CHECK(weir_engine_charge(other, &copy, 200, now) == WEIR_OK, "its own verdict");
    CHECK(weir_engine_charge(e, &v, 401, now) == WEIR_OK, "second 401");
    CHECK(weir_engine_evaluate(e, &r, now, &v, NULL, 0) == WEIR_OK && v.action == WEIR_REJECT
          && v.status == 429 && v.charges[0].limit == -1, "two 401s: refused, nothing to charge");
    weir_engine_free(other);
    weir_engine_free(e);
    weir_policy_free(p);
}

/* weir_engine_log_decision: the three styles, and WEIR_ERR_INVALID (nothing written) for
 * any other value. */
static void
test_log_decision_styles(void)
{
    static const char policy[] =
        "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n"
        "[[limit]]\nname = \"all\"\nclass = \"*\"\nzone = \"z\"\n";
    static const int bad[] = { -1, 3, 42, INT_MIN, INT_MAX };
    weir_policy *p = NULL;
    weir_engine *e = NULL;
    weir_verdict v;
    weir_request r;
    weir_log_decision d;
    int rc;

    CHECK(weir_policy_parse((const uint8_t *) policy, strlen(policy), "s", &p, NULL) == WEIR_OK
          && weir_engine_new(p, &e, NULL) == WEIR_OK, "log decision engine");
    r = (weir_request) { .method = (const uint8_t *) "GET", .method_len = 3,
                         .target = (const uint8_t *) "/", .target_len = 1,
                         .peer = (const uint8_t *) "192.0.2.1", .peer_len = 9 };
    for (int i = 0; i < 2; i++) {
        CHECK(weir_engine_evaluate(e, &r, BASE_NS, &v, NULL, 0) == WEIR_OK, "evaluate %d", i);
    }
    CHECK(v.action == WEIR_REJECT, "the second request is refused");
    for (int style = WEIR_STYLE_POLICY; style <= WEIR_STYLE_CONN; style++) {
        memset(&d, 0, sizeof d);
        rc = weir_engine_log_decision(e, &v, style, &d);
        CHECK(rc == WEIR_OK && d.limit == 0 && d.name_len > 0, "style %d: rc %d", style, rc);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&d, 0x5a, sizeof d);
        rc = weir_engine_log_decision(e, &v, bad[i], &d);
        CHECK(rc == WEIR_ERR_INVALID && d.limit == 0x5a5a5a5a,
              "style %d: rc %d", bad[i], rc);
    }
    weir_engine_release(e, &v, BASE_NS);
    weir_engine_free(e);
    weir_policy_free(p);
}

static void
test_abi_misuse(void)
{
    static const char policy[] =
        "[zones.c]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = 2\n"
        "[[limit]]\nclass = \"*\"\nzone = \"c\"\nkey = \"global\"\nqueue = 1\n";
    static const char by_header[] =
        "trusted_proxies = \"192.0.2.0/24\"\n"
        "[zones.ip]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n"
        "[[limit]]\nclass = \"*\"\nzone = \"ip\"\nburst = 1000\n";
    weir_policy *p = NULL;
    weir_engine *e = NULL;
    weir_verdict v[5], copy;
    weir_request r;
    uint64_t now = BASE_NS;
    long noise;
    int rc;

    CHECK(weir_policy_parse((const uint8_t *) policy, strlen(policy), "c", &p, NULL) == WEIR_OK
          && weir_engine_new(p, &e, NULL) == WEIR_OK, "concurrency engine");
    r = (weir_request) { .method = (const uint8_t *) "GET", .method_len = 3,
                         .target = (const uint8_t *) "/", .target_len = 1,
                         .peer = (const uint8_t *) "192.0.2.1", .peer_len = 9 };

    /* Two in flight (the limit), then a copy of the first verdict released after it. */
    for (int i = 0; i < 2; i++) {
        CHECK(weir_engine_evaluate(e, &r, now, &v[i], NULL, 0) == WEIR_OK
              && v[i].action == WEIR_PASS, "request %d passes", i);
    }
    copy = v[0];
    CHECK(weir_engine_release(e, &v[0], now) == WEIR_OK, "release");
    CHECK(weir_engine_release(e, &copy, now) == WEIR_OK, "release of a copy");
    CHECK(weir_engine_evaluate(e, &r, now, &v[2], NULL, 0) == WEIR_OK
          && v[2].action == WEIR_PASS, "one slot was free");
    CHECK(weir_engine_evaluate(e, &r, now, &v[3], NULL, 0) == WEIR_OK
          && v[3].action == WEIR_QUEUE, "the copy freed no second slot (action %d)", v[3].action);

    /* The queue the ticket waits in is the one the held permits free a slot for; a new
       queue serves its oldest waiter first. */
    CHECK(weir_ticket_queue_key(&v[3].ticket) == v[1].permits[0].key_hash
          && weir_ticket_queue_key(NULL) == 0, "the ticket's queue key");
    CHECK(weir_engine_queue_lifo(e, &v[3].ticket, now) == 0, "a new queue is first come, "
          "first served");
    CHECK(weir_engine_queue_lifo(e, NULL, now) == WEIR_ERR_NULL
          && weir_engine_queue_lifo(e, &v[0].ticket, now) == WEIR_ERR_INVALID,
          "queue_lifo: no ticket");

    /* The queue ticket: abandoned through a copy, then through the original. */
    copy = v[3];
    CHECK(weir_engine_abandon(e, &copy, now) == WEIR_OK, "abandon a copy");
    CHECK(weir_engine_abandon(e, &v[3], now) == WEIR_OK, "abandon the original");
    CHECK(weir_engine_evaluate(e, &r, now, &v[3], NULL, 0) == WEIR_OK
          && v[3].action == WEIR_QUEUE, "the queue place is free again once");
    CHECK(weir_engine_evaluate(e, &r, now, &v[4], NULL, 0) == WEIR_OK
          && v[4].action == WEIR_REJECT, "one queue place only (action %d)", v[4].action);

    /* Forged limit indexes: refused with WEIR_ERR_INVALID, nothing released, nothing printed. */
    copy = v[1];
    copy.permits[0].limit = 7;
    quiet_begin();
    rc = weir_engine_release(e, &copy, now);
    noise = quiet_end();
    CHECK(rc == WEIR_ERR_INVALID && noise == 0, "forged permit: rc %d, %ld bytes on stderr", rc,
        noise);
    CHECK(copy.permits[0].limit == 7, "a refused release leaves the verdict as it was");
    copy = v[3];
    copy.ticket.limit = 40000;
    quiet_begin();
    rc = weir_engine_abandon(e, &copy, now);
    noise = quiet_end();
    CHECK(rc == WEIR_ERR_INVALID && noise == 0, "forged ticket: rc %d, %ld bytes", rc, noise);
    quiet_begin();
    rc = weir_engine_queue_lifo(e, &copy.ticket, now);
    noise = quiet_end();
    CHECK(rc == WEIR_ERR_INVALID && noise == 0, "forged ticket's order: rc %d, %ld bytes", rc,
        noise);
    quiet_begin();
    rc = weir_engine_evaluate_queued(e, &r, now, &copy, NULL, 0);
    noise = quiet_end();
    CHECK(rc == WEIR_ERR_INVALID && noise == 0, "forged queued ticket: rc %d, %ld bytes", rc,
        noise);
    CHECK(weir_engine_evaluate(e, &r, now, &v[4], NULL, 0) == WEIR_OK
          && v[4].action == WEIR_REJECT, "still two in flight, one queued");
    for (int i = 1; i < 3; i++) {
        CHECK(weir_engine_release(e, &v[i], now) == WEIR_OK, "release %d", i);
    }
    CHECK(weir_engine_abandon(e, &v[3], now) == WEIR_OK, "abandon");
    weir_engine_free(e);
    weir_policy_free(p);

    /* The low-level zone API: a copy of a released permit frees nothing either. */
    {
        weir_zone *z = NULL;
        weir_limiter *l = NULL;
        weir_permit pm[4], pcopy;
        weir_check c;
        const uint8_t *k = (const uint8_t *) "k";

        CHECK(weir_zone_new(1 << 16, 1, &z, NULL) == WEIR_OK
              && weir_limiter_concurrency(2, 0, &l, NULL) == WEIR_OK, "zone");
        for (int i = 0; i < 2; i++) {
            CHECK(weir_zone_acquire(z, l, k, 1, now, &c, &pm[i]) == WEIR_OK
                  && c.action == WEIR_PASS, "zone acquire %d", i);
        }
        pcopy = pm[0];
        CHECK(weir_zone_release(z, l, &pm[0], now) == WEIR_OK
              && weir_zone_release(z, l, &pcopy, now) == WEIR_OK, "zone releases");
        CHECK(weir_zone_in_flight(z, l, k, 1, now) == 1, "one still in flight");
        CHECK(weir_zone_acquire(z, l, k, 1, now, &c, &pm[2]) == WEIR_OK
              && c.action == WEIR_PASS, "one slot free");
        CHECK(weir_zone_acquire(z, l, k, 1, now, &c, &pm[3]) == WEIR_OK
              && c.action == WEIR_REJECT && pm[3].limit < 0, "no second slot");
        for (int i = 1; i < 3; i++) {
            CHECK(weir_zone_release(z, l, &pm[i], now) == WEIR_OK, "zone release %d", i);
        }
        CHECK(weir_zone_in_flight(z, l, k, 1, now) == 0, "none in flight");
        weir_limiter_free(l);
        weir_zone_free(z);
    }

    /* A header callback that never runs out: bounded, answered 400, nothing charged. */
    CHECK(weir_policy_parse((const uint8_t *) by_header, strlen(by_header), "h", &p, NULL)
          == WEIR_OK && weir_engine_new(p, &e, NULL) == WEIR_OK, "header engine");
    r.header = endless_header;
    endless_calls = 0;
    rc = weir_engine_evaluate(e, &r, now, &v[0], NULL, 0);
    CHECK(rc == WEIR_ERR_BAD_TARGET && v[0].action == WEIR_REJECT && v[0].status == 400,
        "endless header values: rc %d", rc);
    /* a pass or two over the name, each ending one lookup past the bound */
    CHECK(endless_calls <= 2 * (WEIR_MAX_HEADER_VALUES + 1), "%zu header lookups",
        endless_calls);
    r.header = NULL;
    {
        weir_limit_counters c;
        CHECK(weir_engine_limit_counters(e, 0, &c) == WEIR_OK && c.passed == 0,
            "nothing charged");
    }
    weir_engine_free(e);
    weir_policy_free(p);
}

/* ---------------------------------------------------------------------------------------- */
/* Host limits: a host's own directives through the builder and weir_engine_evaluate_selected */

/* One variable, its value in `ctx` (a NUL-terminated string; NULL: absent). */
static int
one_var(void *ctx, size_t index, const uint8_t **value, size_t *len)
{
    if (ctx == NULL || index != 0) {
        return 0;
    }
    *value = ctx;
    *len = strlen(ctx);
    return 1;
}

static void
host_request(weir_request *r, const char *k)
{
    memset(r, 0, sizeof(*r));
    r->method = (const uint8_t *) "GET";
    r->method_len = 3;
    r->target = (const uint8_t *) "/";
    r->target_len = 1;
    r->peer = (const uint8_t *) "192.0.2.1";
    r->peer_len = 9;
    r->var = one_var;
    r->header_ctx = (void *) k;
}

static weir_limit_spec
host_limit(const char *zone, const char *key)
{
    weir_limit_spec l;

    memset(&l, 0, sizeof(l));
    l.zone = (const uint8_t *) zone;
    l.zone_len = strlen(zone);
    l.key = (const uint8_t *) key;
    l.key_len = strlen(key);
    l.ipv4_prefix = -1;
    l.ipv6_prefix = -1;
    l.log_level = 3;
    return l;
}

static void
test_host_limits(void)
{
    char err[512];
    weir_host_limits *b = weir_host_limits_new();
    weir_zone_spec gcra, conn;
    weir_limit_spec l;
    weir_policy *policy = NULL;
    weir_engine *engine = NULL;
    weir_error *e = NULL;
    weir_verdict v;
    weir_request r;
    uint16_t req, cl, bad[1] = { 99 };
    const uint8_t *name;
    size_t len;
    uint64_t now = BASE_NS;

    memset(&gcra, 0, sizeof(gcra));
    gcra.algorithm = WEIR_ALGORITHM_GCRA;
    gcra.size = 65536;
    CHECK(weir_parse_rate((const uint8_t *) "1r/m", 4, &gcra.rate, err, sizeof(err)) == WEIR_OK,
        "parse rate: %s", err);
    CHECK(weir_host_limits_zone(b, (const uint8_t *) "one", 3, &gcra) == WEIR_OK, "zone one");
    memset(&conn, 0, sizeof(conn));
    conn.algorithm = WEIR_ALGORITHM_CONCURRENCY;
    conn.size = 65536;
    CHECK(weir_host_limits_zone(b, (const uint8_t *) "addr", 4, &conn) == WEIR_OK, "zone addr");

    l = host_limit("one", "var:k");
    l.status = 503;
    CHECK(weir_host_limits_limit(b, &l, &req) == WEIR_OK && req == 0, "limit one: %u", req);
    l = host_limit("addr", "var:k");
    l.max = 1;
    CHECK(weir_host_limits_limit(b, &l, &cl) == WEIR_OK && cl == 1, "limit addr: %u", cl);
    CHECK(weir_host_limits_build(b, &policy, err, sizeof(err)) == WEIR_OK, "build: %s", err);
    CHECK(weir_engine_new(policy, &engine, &e) == WEIR_OK, "engine: %s",
        e ? weir_error_message(e) : "");
    if (engine == NULL) {
        goto done;
    }
    CHECK(weir_engine_var_count(engine) == 1, "one variable");
    CHECK(weir_engine_var_name(engine, 0, &name, &len) == WEIR_OK && len == 1
          && memcmp(name, "k", 1) == 0, "variable k");
    CHECK(weir_engine_var_name(engine, 1, &name, &len) == WEIR_ERR_INVALID, "no variable 1");

    /* Host limits never apply by the policy's classes. */
    host_request(&r, "a");
    CHECK(weir_engine_evaluate(engine, &r, now, &v, NULL, 0) == WEIR_OK && v.unmatched == 1,
        "evaluate leaves host limits alone");

    /* 1r/m, burst 0: the second request is rejected with nginx's excess 1.000. */
    CHECK(weir_engine_evaluate_selected(engine, &r, &req, 1, now, &v) == WEIR_OK
          && v.action == WEIR_PASS && v.unmatched == 0, "first passes");
    CHECK(weir_engine_evaluate_selected(engine, &r, &req, 1, now, &v) == WEIR_OK
          && v.action == WEIR_REJECT && v.status == 503 && v.limit == 0
          && v.excess_milli == 1000, "second rejected: action %d status %d excess %llu",
        v.action, v.status, (unsigned long long) v.excess_milli);

    /* An empty or absent variable: the limit does not apply. */
    host_request(&r, "");
    CHECK(weir_engine_evaluate_selected(engine, &r, &req, 1, now, &v) == WEIR_OK
          && v.action == WEIR_PASS && v.unmatched == 1, "empty key not accounted");
    host_request(&r, NULL);
    CHECK(weir_engine_evaluate_selected(engine, &r, &req, 1, now, &v) == WEIR_OK
          && v.unmatched == 1, "absent key not accounted");
    r.var = NULL;
    CHECK(weir_engine_evaluate_selected(engine, &r, &req, 1, now, &v) == WEIR_OK
          && v.unmatched == 1, "no variables at all");

    /* The limit's own max (1), not the zone's. */
    host_request(&r, "b");
    CHECK(weir_engine_evaluate_selected(engine, &r, &cl, 1, now, &v) == WEIR_OK
          && v.action == WEIR_PASS && v.permits[0].limit == 1, "first connection");
    {
        weir_verdict second;
        CHECK(weir_engine_evaluate_selected(engine, &r, &cl, 1, now, &second) == WEIR_OK
              && second.action == WEIR_REJECT && second.excess_milli == 1000,
            "second connection rejected");
    }
    CHECK(weir_engine_release(engine, &v, now) == WEIR_OK, "release");
    CHECK(weir_engine_evaluate_selected(engine, &r, &cl, 1, now, &v) == WEIR_OK
          && v.action == WEIR_PASS, "after release");
    weir_engine_release(engine, &v, now);

    /* Bad selections charge nothing. */
    CHECK(weir_engine_evaluate_selected(engine, &r, bad, 1, now, &v) == WEIR_ERR_INVALID,
        "unknown limit");
    CHECK(weir_engine_evaluate_selected(engine, &r, NULL, 1, now, &v) == WEIR_ERR_NULL,
        "NULL limits");
    CHECK(weir_engine_evaluate_selected(engine, &r, NULL, 0, now, &v) == WEIR_OK
          && v.unmatched == 1, "no limits");

done:
    weir_error_free(e);
    weir_engine_free(engine);
    weir_policy_free(policy);
    weir_host_limits_free(b);

    /* Problems are reported by build, in the policy's words, naming the limit. */
    b = weir_host_limits_new();
    CHECK(weir_host_limits_zone(b, (const uint8_t *) "one", 3, &gcra) == WEIR_OK, "zone");
    l = host_limit("two", "var:k");
    CHECK(weir_host_limits_limit(b, &l, &req) == WEIR_OK, "limit on an unknown zone");
    l = host_limit("one", "bogus");
    CHECK(weir_host_limits_limit(b, &l, &req) == WEIR_OK, "limit with a bad key");
    policy = NULL;
    CHECK(weir_host_limits_build(b, &policy, err, sizeof(err)) == WEIR_ERR_POLICY
          && policy == NULL, "build refuses");
    CHECK(strstr(err, "limit 0 (zone \"two\"): unknown zone \"two\"") != NULL
          && strstr(err, "limit 1 (zone \"one\"): unknown key part \"bogus\"") != NULL,
        "errors name their limit: %s", err);
    l = host_limit("one", "var:k");
    l.log_level = 9;
    CHECK(weir_host_limits_limit(b, &l, &req) == WEIR_ERR_INVALID, "log level out of range");
    CHECK(weir_host_limits_limit(NULL, &l, &req) == WEIR_ERR_NULL, "NULL builder");
    CHECK(weir_host_limits_zone(b, NULL, 3, &gcra) == WEIR_ERR_NULL, "NULL zone name");
    weir_host_limits_free(b);
    weir_host_limits_free(NULL);
}

int
main(int argc, char **argv)
{
    test_bad_inputs();
    test_abi_misuse();
    test_charge_on_status();
    test_log_decision_styles();
    test_parse_values();
    test_host_limits();
    test_fork_shared_region();
    test_fork_engine_regions();
    test_cluster_region();
    test_vectors(argc > 1 ? argv[1] : "tests/vectors");
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}

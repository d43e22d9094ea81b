/*
 * A complete host in miniature: load a policy, evaluate requests, act on the verdict, release
 * permits, print metrics. Built and run by `make c-test`:
 *
 *   make pc && export PKG_CONFIG_PATH=$PWD/target/release
 *   cc examples/c/limit_requests.c \
 *      $(pkg-config --static --cflags --libs weir | sed 's/-lweir/-l:libweir.a/') -o limit_requests
 *   ./limit_requests examples/api.toml
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir.h"

/* The host's own request representation. */
struct my_request {
    const char *method, *target, *peer;
    const char *header_names[4], *header_values[4];
};

/* Header lookup: weir asks for lowercase names; compare case-insensitively in real hosts. */
static int
lookup(void *ctx, const uint8_t *lname, size_t len, size_t nth, const uint8_t **value,
    size_t *value_len)
{
    struct my_request *r = ctx;
    size_t seen = 0;

    for (int i = 0; i < 4 && r->header_names[i] != NULL; i++) {
        if (strlen(r->header_names[i]) == len && memcmp(r->header_names[i], lname, len) == 0
            && seen++ == nth)
        {
            *value = (const uint8_t *) r->header_values[i];
            *value_len = strlen(r->header_values[i]);
            return 1;
        }
    }
    return 0;
}

int
main(int argc, char **argv)
{
    weir_policy *policy = NULL;
    weir_engine *engine = NULL;
    weir_error *err = NULL;
    struct my_request mine = { "GET", "/v1/items?page=2", "192.0.2.10",
                               { "x-api-key", NULL }, { "demo-key", NULL } };
    char headers[512], *metrics;
    size_t need = 0;

    if (weir_policy_load(argc > 1 ? argv[1] : "examples/api.toml", &policy, &err) != WEIR_OK
        || weir_engine_new(policy, &engine, &err) != WEIR_OK)
    {
        fprintf(stderr, "weir: %s\n", weir_error_message(err));
        weir_error_free(err);
        weir_policy_free(policy);
        return 1;
    }

    for (int i = 0; i < 5; i++) {
        weir_request req = {
            .method = (const uint8_t *) mine.method, .method_len = strlen(mine.method),
            .target = (const uint8_t *) mine.target, .target_len = strlen(mine.target),
            .peer = (const uint8_t *) mine.peer, .peer_len = strlen(mine.peer),
            .header = lookup, .header_ctx = &mine,
        };
        weir_verdict v;
        uint64_t now = weir_now_ns();
        int rc = weir_engine_evaluate(engine, &req, now, &v, (uint8_t *) headers,
                                      sizeof(headers));

        if (rc == WEIR_ERR_BAD_TARGET) {
            printf("request %d: 400 Bad Request\n", i);
            continue;
        }
        if (rc != WEIR_OK) {
            printf("request %d: weir error %d, failing open\n", i, rc);
            continue;
        }
        switch (v.action) {
        case WEIR_PASS:
            printf("request %d: pass\n", i);
            break;
        case WEIR_DELAY:
            printf("request %d: serve after %llu ms\n", i,
                   (unsigned long long) (v.wait_ns / 1000000));
            break;
        case WEIR_QUEUE:
            /* A real host waits (up to the limit's timeout) and calls
             * weir_engine_evaluate_queued(engine, &req, later, &v, ...); here we give up. */
            weir_engine_abandon(engine, &v, now);
            printf("request %d: queued, abandoned\n", i);
            break;
        case WEIR_REJECT: {
            const uint8_t *name = (const uint8_t *) "";
            size_t len = 0;
            if (v.limit >= 0) {
                weir_engine_limit_name(engine, (size_t) v.limit, &name, &len);
            }
            printf("request %d: %u by limit %.*s, headers:\n%.*s", i, v.status, (int) len,
                   (const char *) name, (int) v.headers_len, headers);
            break;
        }
        }
        /* When the response is complete (always safe to call; idempotent). */
        weir_engine_release(engine, &v, weir_now_ns());
    }

    weir_engine_prometheus(engine, NULL, 0, &need);
    metrics = malloc(need);
    if (weir_engine_prometheus(engine, (uint8_t *) metrics, need, &need) == WEIR_OK) {
        printf("\nmetrics (%zu bytes), first line: %.*s\n", need,
               (int) (strchr(metrics, '\n') - metrics), metrics);
    }
    free(metrics);
    weir_engine_free(engine);
    weir_policy_free(policy);
    return 0;
}

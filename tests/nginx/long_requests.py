"""Requests held longer than the concurrency lease keep counting (run by run.py:
long-requests). A policy concurrency limit (`lease = "2s"`) and `weir_conn` (`lease=2s`), both
max 1, in front of a backend that holds the first request for three leases: a second
request stays rejected the whole time, from either of two workers, because the worker
holding the permit renews its lease; once the first completes, the second is admitted."""

import time

from run import Backend, Nginx, check, read_response, request, send

LEASE_S = 2
HELD_S = 3 * LEASE_S

POLICY = f"""[zones.c]
size = "64k"
algorithm = "concurrency"
max = 1
lease = "{LEASE_S}s"
[[limit]]
name = "one"
class = "*"
zone = "c"
key = "global"
"""

HTTP = f"""
    weir_conn_zone $http_x_key zone=dz:1m lease={LEASE_S}s;
    weir_policy %DIR%/policy.toml;
    server {{
        listen 127.0.0.1:%PORT% reuseport;
        proxy_read_timeout 60s;
        location = /p {{ weir on; proxy_pass http://127.0.0.1:BACKEND; }}
        location = /d {{ weir_conn dz 1; proxy_pass http://127.0.0.1:BACKEND; }}
    }}
"""


def test_long_requests(module, env=None):
    backend = Backend()
    ngx = Nginx(module, HTTP.replace("BACKEND", str(backend.port)), workers=2, env=env,
                files={"policy.toml": POLICY})
    try:
        ngx.start()
        key = [("X-Key", "k")]
        first = {p: send(ngx.port, "GET", p, key + [("X-Weir-Step", p)], timeout=60)
                 for p in ("/p", "/d")}
        t0 = time.time()
        while not all(backend.seen(p) is not None for p in first):
            check(time.time() - t0 < 10, "the first requests did not reach the backend")
            time.sleep(0.02)
        refused = {"/p": set(), "/d": set()}
        probes = 0
        while time.time() - t0 < HELD_S:
            for p in first:
                status, _ = request(ngx.port, "GET", p, key)
                refused[p].add(status)
            probes += 1
            time.sleep(0.25)
        held = time.time() - t0
        check(refused == {"/p": {429}, "/d": {503}},
              f"a second request while the first is held {held:.1f}s ({HELD_S // LEASE_S} "
              f"leases): {refused}")
        for p, s in first.items():
            backend.event(p).set()
            check(read_response(s)[0] == 200, f"{p}: the held request failed")
        for p in first:
            status, _ = request(ngx.port, "GET", p, key)
            check(status == 200, f"{p}: after the first completed: {status}")
        ngx.check_log()
    finally:
        backend.server.shutdown()
        ngx.cleanup()
    return (f"with a {LEASE_S}s lease, a request held {held:.1f}s kept its permit (policy "
            f"limit and weir_conn, 2 workers): {probes} rounds of second requests all refused, "
            f"admitted once it completed")

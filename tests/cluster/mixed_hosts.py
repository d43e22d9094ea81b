#!/usr/bin/env python3
"""One cluster concurrency pool shared by three different hosts at once (make cluster-mixed):
nginx (policy mode, two workers), Caddy (the weir handler's `policy`) and a tower service
(tower/examples/overload_proxy) load one policy whose zone is a `max = 30` pool with
`scope = "cluster"` over a real redis-server, and proxy to one backend
(benches/overload/backend.py) that counts the requests in it. Closed-loop clients load all
three; the backend never holds more than 30 at once, and every host admits its part.

  mixed_hosts.py --module NGINX_MODULE --caddy CADDY --tower OVERLOAD_PROXY
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "benches", "overload"))
sys.path.insert(0, os.path.join(HERE, "..", "nginx"))

import frontends  # noqa: E402
from run import Redis  # noqa: E402

MAX, SECS = 30, 5

POLICY = """[zones.search]
size = "1m"
algorithm = "concurrency"
max = {max}
scope = "cluster"
redis = "redis://127.0.0.1:{port}/0"
sync_interval = "100ms"
expected_nodes = 3
[[limit]]
name = "search"
class = "*"
zone = "search"
key = "global"
status = 503
"""


def stats(backend):
    with urllib.request.urlopen(f"http://127.0.0.1:{backend.port}/_stats", timeout=5) as r:
        return json.load(r)


def load(ports, per_host, secs):
    """Closed-loop clients on each port for `secs`; answers by (port, status)."""
    counts, lock, stop = {}, threading.Lock(), time.time() + secs

    def client(port):
        while time.time() < stop:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/search", timeout=10) as r:
                    st = r.status
            except urllib.error.HTTPError as e:
                st = e.code
            except OSError:
                st = 0
            with lock:
                counts[(port, st)] = counts.get((port, st), 0) + 1
            if st != 200:
                time.sleep(0.01)

    ts = [threading.Thread(target=client, args=(p,)) for p in ports for _ in range(per_host)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--caddy", required=True)
    ap.add_argument("--tower", required=True)
    args = ap.parse_args()
    redis = Redis().start()
    work = tempfile.mkdtemp(prefix="weir-mixed-")
    hosts, backend = [], None
    try:
        backend = frontends.Backend(work, slots=200, service_ms=100, jitter=0.1)
        policy = POLICY.format(max=MAX, port=redis.port)
        hosts = [frontends.Nginx(args.module, backend.port, policy, workers=2),
                 frontends.Caddy(args.caddy, backend.port, policy),
                 frontends.Tower(args.tower, backend.port, policy)]
        for h in hosts:
            h.start()
        time.sleep(1)  # every syncer's first sync
        stats(backend)  # resets max_in_flight
        counts = load([h.port for h in hosts], per_host=20, secs=SECS)
        peak = stats(backend)["max_in_flight"]
        names = ["nginx", "caddy", "tower"]
        admitted = [counts.get((h.port, 200), 0) for h in hosts]
        refused = [counts.get((h.port, 503), 0) for h in hosts]
        errors = sum(n for (_, st), n in counts.items() if st not in (200, 503))
        print(f"mixed hosts, one pool of {MAX}: peak {peak} in the backend; admitted "
              f"{dict(zip(names, admitted))}, refused {dict(zip(names, refused))} in {SECS} s; "
              f"{errors} errors")
        failed = []
        if peak > MAX:
            failed.append(f"{peak} requests in the backend at once (max {MAX})")
        if min(admitted) < sum(admitted) / 10:
            failed.append(f"a host admitted little: {admitted}")
        if sum(refused) == 0:
            failed.append("nothing refused: the pool did not bind")
        if errors:
            failed.append(f"{errors} requests failed")
        if failed:
            for h in hosts:
                print(f"--- {type(h).__name__} log:\n{h.error_log()}")
            sys.exit("cluster-mixed: " + "; ".join(failed))
        print("cluster-mixed: ok")
    finally:
        for h in hosts:
            h.stop()
        if backend:
            backend.stop()
        redis.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

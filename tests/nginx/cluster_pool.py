"""A cluster concurrency pool across nginx nodes (run by run.py: cluster-pool). Three nginx
nodes with two workers each proxy to one backend that counts the requests in it, per node and
in all; one `max = 30` pool (`scope = "cluster"`) over a real redis-server.

1. Closed-loop clients load the nodes unevenly (20/12/0 clients), then the demand moves
   (0/4/30): the backend never holds more than 30 at once, and the third node gets most of the
   share (`weir_cluster_share`: 24 of the 30 beside the others' floors and the second node's
   4) soon after; the time is printed.
2. A node SIGKILLed (master and workers) with its requests in flight: Redis forgets its share
   when its grant lease (1 s) ends, and the busy node's share takes it; the time is printed.
3. Redis SIGKILLed for 3 s: answers are not slowed (median time per request before and during
   printed; the request path never talks to Redis), the nodes keep their grants for the lease
   and then admit `max ÷ expected_nodes` each; restarted, they sync again."""

import http.server
import os
import re
import signal
import statistics
import threading
import time

from run import Nginx, Redis, check, get_body, request

MAX, NODES, SERVICE_MS = 30, 3, 100


class Backend:
    """Answers after SERVICE_MS; counts the requests in it by the X-Node header."""

    def __init__(self):
        self.lock = threading.Lock()
        self.node = [0] * NODES
        self.total = self.peak = 0
        backend = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                n = int(self.headers.get("X-Node", "0"))
                with backend.lock:
                    backend.node[n] += 1
                    backend.total += 1
                    backend.peak = max(backend.peak, backend.total)
                try:
                    time.sleep(SERVICE_MS / 1000)
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the proxy of a killed node is gone
                finally:
                    with backend.lock:
                        backend.node[n] -= 1
                        backend.total -= 1

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.server.request_queue_size = 256
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def running(self):
        with self.lock:
            return list(self.node)

    def reset_peak(self):
        with self.lock:
            self.peak, peak = self.total, self.peak
        return peak


class Clients:
    """Closed-loop clients per node; `busy[n]` of them send, the rest idle. Records each
    answer's (time, node, status, seconds)."""

    def __init__(self, ports, per_node=34):
        self.ports, self.busy = ports, [0] * len(ports)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.log, self.errors = [], []
        self.ts = [threading.Thread(target=self.run, args=(n, i), daemon=True)
                   for n in range(len(ports)) for i in range(per_node)]
        for t in self.ts:
            t.start()

    def run(self, n, i):
        while not self.stop.is_set():
            if i >= self.busy[n]:
                time.sleep(0.02)
                continue
            t = time.monotonic()
            try:
                st, _ = request(self.ports[n], "GET", "/search", timeout=5)
            except Exception as e:  # a killed node resets its connections
                with self.lock:
                    self.errors.append((n, e))
                time.sleep(0.05)
                continue
            with self.lock:
                self.log.append((t, n, st, time.monotonic() - t))
            if st != 200:
                time.sleep(0.01)

    def median(self, t0, t1, status=200):
        with self.lock:
            d = [s for t, _, st, s in self.log if t0 <= t < t1 and st == status]
        return statistics.median(d) if d else None

    def close(self):
        self.stop.set()
        for t in self.ts:
            t.join()


def share(port):
    """The node's `weir_cluster_share` (units it may hold over its keys, at its last sync)."""
    _, text = get_body(port, "/metrics")
    m = re.search(r'^weir_cluster_share\{zone="pool"\} (\d+)$', text, re.M)
    check(m, "weir_status lacks weir_cluster_share:\n" + text)
    return int(m.group(1))


def until(cond, limit):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


def test_cluster_pool(module, env=None):
    redis = Redis().start()
    backend = Backend()
    policy = f"""[zones.pool]
size = "64k"
algorithm = "concurrency"
max = {MAX}
scope = "cluster"
redis = "redis://127.0.0.1:{redis.port}/0"
sync_interval = "100ms"
expected_nodes = {NODES}
[[limit]]
name = "search"
class = "*"
zone = "pool"
key = "global"
status = 503
"""
    http = """
    weir_policy %DIR%/policy.toml;
    server {
        listen 127.0.0.1:%PORT% reuseport;
        location = /metrics { weir_status; }
        location / {
            weir on;
            proxy_set_header X-Node NODE;
            proxy_pass http://127.0.0.1:BACKEND;
        }
    }
""".replace("BACKEND", str(backend.port))
    nodes = [Nginx(module, http.replace("NODE", str(n)), workers=2, env=env,
                   files={"policy.toml": policy}) for n in range(NODES)]
    clients, res = None, []
    try:
        for n in nodes:
            n.start()
        clients = Clients([n.port for n in nodes])

        # 1. Uneven demand, then moved to the third node.
        clients.busy[:] = [20, 12, 0]
        time.sleep(3)
        before = backend.running()
        clients.busy[:] = [0, 4, 30]
        moved = until(lambda: share(nodes[2].port) >= 20, 5)
        time.sleep(1.5)
        after = backend.running()
        peak = backend.reset_peak()
        check(peak <= MAX, f"{peak} requests in the backend at once (max {MAX})")
        check(before[0] + before[1] >= 24, f"the busy nodes got little of the pool: {before}")
        check(moved is not None, f"the share did not follow the demand: {after}")
        res.append(f"demand 20/12/0 -> 0/4/30: in the backend {before} -> {after}, node 3's "
                   f"share at 20 after {moved * 1000:.0f} ms; peak {peak} (max {MAX})")

        # 2. The second node SIGKILLed with requests in flight; the third wants everything.
        clients.busy[:] = [0, 15, 30]
        time.sleep(1.5)
        victim = nodes[1]
        pids = [victim.pid] + victim.workers_pids()
        clients.busy[1] = 0
        for p in pids:
            os.kill(p, signal.SIGKILL)
        t_kill = time.monotonic()
        back = until(lambda: share(nodes[2].port) >= 25, 8)
        peak = backend.reset_peak()
        check(back is not None, f"a killed node's share never came back: {backend.running()}")
        check(peak <= MAX, f"{peak} requests in the backend at once (max {MAX})")
        res.append(f"node 2 SIGKILLed holding its share: node 3's share at 25 after "
                   f"{(time.monotonic() - t_kill) * 1000:.0f} ms (grant lease 1 s); peak {peak}")
        victim.pid = None

        # 3. Redis SIGKILLed for 3 s under load, then restarted.
        clients.busy[:] = [15, 0, 15]
        time.sleep(1.5)
        t0 = time.monotonic()
        time.sleep(1.5)
        t_kill = time.monotonic()
        redis.kill()
        time.sleep(3)
        t_up = time.monotonic()
        down = backend.reset_peak()
        redis.start()
        time.sleep(2)
        clients.busy[:] = [0, 0, 0]
        time.sleep(0.3)
        up = backend.reset_peak()
        normal, away = clients.median(t0, t_kill), clients.median(t_kill, t_up)
        check(normal is not None and away is not None, "no answers to compare")
        check(away < normal + 0.05, f"answers slowed with Redis away: median {normal:.3f} s "
              f"before, {away:.3f} s during")
        check(down <= MAX, f"{down} in the backend with Redis away (2 nodes x {MAX // NODES} "
              f"on the fallback, or their grants)")
        res.append(f"redis SIGKILLed 3 s: median answer {normal * 1000:.0f} ms before, "
                   f"{away * 1000:.0f} ms during; peak {down}; restarted: peak {up}")
        for n in (nodes[0], nodes[2]):
            log = n.error_log()
            check("weir: cluster zone pool: sync failed" in log, "no sync error logged")
        return "; ".join(res)
    finally:
        if clients:
            clients.close()
        for n in nodes:
            n.cleanup()
        backend.server.shutdown()
        redis.cleanup()


def test_cluster_directives(module, env=None):
    """`weir_req_zone … scope=cluster redis=… expected_nodes=2` on two nginx nodes of two
    workers: one `rate=50r/s` limit across both (closed-loop clients on both nodes admit about
    the rate, not twice it); a zone directive with `scope=cluster` and no `redis` fails
    `nginx -t` at its file and line."""
    redis = Redis().start()
    rate, secs = 50, 4
    http = f"""
    weir_req_zone $server_name zone=api:1m rate={rate}r/s scope=cluster
                  redis=redis://127.0.0.1:{redis.port}/0 expected_nodes=2 sync_interval=100ms;
    server {{
        listen 127.0.0.1:%PORT% reuseport;
        server_name api;
        location = /metrics {{ weir_status; }}
        root %DIR%/html;
        location / {{ weir_req zone=api burst=5 nodelay; try_files /f =404; }}
    }}
"""
    nodes = [Nginx(module, http, workers=2, env=env, files={"html/f": "ok"}) for _ in range(2)]
    bad = Nginx(module, http.replace(f" redis=redis://127.0.0.1:{redis.port}/0", ""), env=env)
    try:
        rc, out = bad.test_config()
        check(rc != 0 and "nginx.conf:" in out and "needs `redis`" in out,
              f"nginx -t without redis: {rc} {out.strip()}")
        for n in nodes:
            n.start()
        synced = re.compile(r'^weir_cluster_syncs_total\{zone="api"\} [1-9]', re.M)
        for n in nodes:
            check(until(lambda: synced.search(get_body(n.port, "/metrics")[1]), 10) is not None,
                  "the directive zone never synced")
        clients = Clients([n.port for n in nodes], per_node=3)
        try:
            clients.busy[:] = [3, 3]
            time.sleep(1)
            t0 = time.monotonic()
            time.sleep(secs)
            t1 = time.monotonic()
        finally:
            clients.close()
        with clients.lock:
            done = [(n, st) for t, n, st, _ in clients.log if t0 <= t < t1]
        admitted = [sum(1 for n, st in done if n == i and st == 200) for i in range(2)]
        offered = len(done) / secs
        total = sum(admitted) / secs
        check(0.8 * rate <= total <= 1.3 * rate,
              f"{admitted} admitted in {secs} s over the nodes: {total:.0f}/s, limit {rate}/s")
        check(min(admitted) >= sum(admitted) / 4, f"the nodes shared unevenly: {admitted}")
        return (f"weir_req_zone scope=cluster on 2 nodes x 2 workers: {total:.0f}/s admitted "
                f"over both (limit {rate}/s, {offered:.0f}/s offered; {admitted} per node); "
                f"nginx -t without redis: {out.strip().splitlines()[0][:160]}")
    finally:
        for n in nodes + [bad]:
            n.cleanup()
        redis.cleanup()

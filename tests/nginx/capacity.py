"""Concurrency limits that measure the backend (run by run.py: capacity). One nginx worker
proxies to a small backend that counts the requests in it.

auto: a limit with `max = "auto"`, lanes and a queue. Clients that read a 1 MiB response
slowly (a small receive buffer, a pause between reads: each takes over a second) still teach
the limit the backend's time: the JSON status's `latency_ms` is the backend's service time,
not the clients'. A permit goes back once the upstream response is complete: `in_flight`
returns to 0 while a client has not read a byte of it. The Prometheus text is valid and has
the `weir_concurrency_*` families.

hand-over: `max = 2` with `reserve = 1` (one slot for normal requests, one more for critical
ones) and a queue of one place. While a request A holds the normal slot and B waits, /healthz
(critical) passes and a sheddable request is shed (the queue's place is taken). When A ends,
B gets the slot at once (the delay is printed, not asserted): a request C sent once A's
response is read finds B in the backend and the queue's place free, and queues behind B.
(Were B only to ask at its next poll, C would find the place still B's and be shed.) The
worker wakes B in the event loop turn that releases A's permit, before it accepts C. With a
queue of three places, three waiters get the slot in the order they came.

standing: once the queue stands (every waiter served for an interval waited longer than 5 ms),
a freed slot goes to the newest waiter: of three lined up while the slot is taken, the third
reaches the backend first. Eight 300 ms answers first teach the limit its no-load latency, so
that a standing queue's waiters are refused only after 300 ms (time to line three up).

directives: `weir_conn ZONE auto` gives its permit back when the upstream is done, as a
policy's; `weir_conn ZONE 1` keeps limit_conn's meaning and holds it until the client has
read the response."""

import http.server
import json
import re
import socket
import subprocess
import threading
import time
import urllib.parse

from run import Nginx, check, get_body, read_response, send

SERVICE_MS = 100
BIG = 1 << 20
CHUNK = 16384
PAUSE_S = 0.02
SLOW_CLIENTS = 12

LANES = """[classes.health]
match = [{ path = "/healthz" }]
lane = "critical"

[classes.tools]
match = [{ path_prefix = "/tools/" }]
lane = "sheddable"

[[limit]]
name = "backend"
class = "*"
zone = "backend"
key = "global"
"""

AUTO = """[zones.backend]
size = "64k"
algorithm = "concurrency"
max = "auto"
bounds = [2, 50]
reserve = 1

""" + LANES + """queue = 20
timeout = "10s"
"""

FIXED = """[zones.backend]
size = "64k"
algorithm = "concurrency"
max = 2
reserve = 1

""" + LANES + """queue = 1
timeout = "10s"
"""

STANDING = """[zones.backend]
size = "64k"
algorithm = "concurrency"
max = 1

[[limit]]
name = "backend"
class = "*"
zone = "backend"
key = "global"
queue = 8
timeout = "10s"
"""
NOLOAD_MS = 300

HTTP = """
    weir_policy %DIR%/policy.toml;
    server {
        listen 127.0.0.1:%PORT% sndbuf=16k;
        location = /metrics { weir_status; }
        location / { weir on; proxy_pass http://127.0.0.1:BACKEND; proxy_read_timeout 60s; }
    }
"""

FAMILIES = ("weir_concurrency_limit", "weir_concurrency_in_flight", "weir_concurrency_queued",
            "weir_concurrency_noload_latency_seconds", "weir_concurrency_latency_seconds")


class CountingBackend:
    """GET /PATH?id=ID[&ms=N][&bytes=N][&hold=1]: holds the request until released (hold),
    sleeps N ms, answers N bytes; counts the requests in it and records when each came, began
    its answer and left (time.monotonic())."""

    def __init__(self):
        self.lock = threading.Lock()
        self.active = self.peak = 0
        self.arrived, self.answered, self.ended, self.holds = {}, {}, {}, {}
        backend = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                rid = q.get("id", self.path)
                with backend.lock:
                    backend.active += 1
                    backend.peak = max(backend.peak, backend.active)
                    backend.arrived[rid] = time.monotonic()
                try:
                    if q.get("hold"):
                        backend.hold(rid).wait(30)
                    time.sleep(int(q.get("ms", 0)) / 1000)
                    body = b"x" * int(q.get("bytes", 2))
                    with backend.lock:
                        backend.answered[rid] = time.monotonic()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    with backend.lock:
                        backend.active -= 1
                        backend.ended[rid] = time.monotonic()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold(self, rid):
        with self.lock:
            return self.holds.setdefault(rid, threading.Event())

    def wait(self, what, rid, limit=10.0):
        t0 = time.monotonic()
        while True:
            with self.lock:
                t = getattr(self, what).get(rid)
            if t is not None:
                return t
            check(time.monotonic() - t0 < limit, f"the backend never saw {rid} {what}")
            time.sleep(0.005)

    def stop(self):
        for ev in list(self.holds.values()):
            ev.set()
        self.server.shutdown()


def slow_client(port, target):
    """A request from a client with a 16 KiB receive buffer (it reads nothing yet)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CHUNK)
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    return s


def read_slowly(s):
    """(status, body bytes, reads): reads at most 16 KiB at a time, pausing between reads."""
    data, reads = b"", 0
    while chunk := s.recv(CHUNK):
        data += chunk
        reads += 1
        time.sleep(PAUSE_S)
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), len(body), reads


def capacity(port):
    """limits[].capacity of limit "backend" in the JSON status."""
    status, body = get_body(port, "/metrics?format=json")
    check(status == 200, f"weir_status?format=json: {status}")
    for lim in json.loads(body)["limits"]:
        if lim["name"] == "backend":
            check("capacity" in lim, f"limit backend has no capacity: {lim}")
            return lim["capacity"]
    raise AssertionError("no limit backend")


def until(port, what, cond, limit=10.0):
    t0 = time.monotonic()
    while not cond(c := capacity(port)):
        check(time.monotonic() - t0 < limit, f"{what}: capacity {c}")
        time.sleep(0.01)
    return c


def prometheus(port, promcheck):
    """The Prometheus text, checked by promcheck, as {series: value} of weir_concurrency_*."""
    status, text = get_body(port, "/metrics")
    check(status == 200, f"weir_status: {status}")
    p = subprocess.run([promcheck], input=text, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"not valid Prometheus text: {p.stderr.strip()}\n{text}")
    for fam, kind in [(f, "gauge") for f in FAMILIES] + [
            ("weir_concurrency_shed_total", "counter"),
            ("weir_concurrency_queue_wait_seconds", "histogram")]:
        check(f"# TYPE {fam} {kind}\n" in text, f"no {kind} {fam}:\n{text}")
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^(weir_concurrency_\w+\{limit="backend"[^}]*\}) (\S+)$', text, re.M)}


def test_auto(module, promcheck, backend, env):
    ngx = Nginx(module, HTTP.replace("BACKEND", str(backend.port)), env=env,
                files={"policy.toml": AUTO})
    try:
        ngx.start()
        # Slow clients, started 30 ms apart: 8 samples over more than 100 ms close a window.
        results = [None] * SLOW_CLIENTS

        def client(i):
            s = slow_client(ngx.port, f"/big?id=s{i}&ms={SERVICE_MS}&bytes={BIG}")
            t0 = time.monotonic()
            results[i] = read_slowly(s) + (time.monotonic() - t0,)

        threads = []
        for i in range(SLOW_CLIENTS):
            threads.append(threading.Thread(target=client, args=(i,)))
            threads[-1].start()
            time.sleep(0.03)
        for i in range(SLOW_CLIENTS):
            backend.wait("ended", f"s{i}")
        reading = sum(r is None for r in results)
        cap = until(ngx.port, "the upstreams are done: no permit held",
                    lambda c: c["in_flight"] == 0)
        for t in threads:
            t.join(60)
        check(all(r and r[:2] == (200, BIG) for r in results),
              f"slow clients: {[r and r[:3] for r in results]}")
        client_ms = min(r[2] for r in results) * PAUSE_S * 1000
        check(cap["auto"] is True and cap["queued"] == 0, f"capacity: {cap}")
        latency = cap["latency_ms"]
        # The backend sleeps SERVICE_MS; each client reads for over client_ms.
        check(SERVICE_MS * 0.99 <= latency < client_ms / 2,
              f"latency_ms {latency}: not the backend's {SERVICE_MS} ms (clients read for "
              f"over {client_ms:.0f} ms): {cap}")
        check(set(cap["shed"]) == {"critical", "normal", "sheddable"}, f"shed: {cap}")
        slowest = max(r[3] for r in results) * 1000

        # A client that reads nothing: its permit goes back when the upstream is done.
        s = slow_client(ngx.port, f"/big?id=r&hold=1&bytes={BIG}")
        backend.wait("arrived", "r")
        held = until(ngx.port, "a request in the backend holds a permit",
                     lambda c: c["in_flight"] == 1)["in_flight"]
        backend.hold("r").set()
        backend.wait("ended", "r")
        until(ngx.port, "the upstream is done, the client has read nothing",
              lambda c: c["in_flight"] == 0)
        got = read_slowly(s)
        check(got[:2] == (200, BIG), f"the unread response: {got}")

        series = prometheus(ngx.port, promcheck)
        check(series.get('weir_concurrency_latency_seconds{limit="backend"}') is not None
              and series.get('weir_concurrency_in_flight{limit="backend"}') == 0,
              f"weir_concurrency_*: {series}")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return (f"auto: latency_ms {latency:.1f} for a backend of {SERVICE_MS} ms while "
            f"{SLOW_CLIENTS} clients read 1 MiB for {client_ms:.0f}-{slowest:.0f} ms "
            f"({reading} still reading when the samples were in), limit {cap['limit']}; "
            f"in_flight {held} -> 0 before the client read a byte")


def test_hand_over(module, promcheck, backend, env):
    ngx = Nginx(module, HTTP.replace("BACKEND", str(backend.port)), env=env,
                files={"policy.toml": FIXED})
    try:
        ngx.start()
        backend.peak = 0
        a = send(ngx.port, "GET", "/h?id=A&hold=1")
        backend.wait("arrived", "A")
        b = send(ngx.port, "GET", "/h?id=B&hold=1")
        until(ngx.port, "B waits", lambda c: c["in_flight"] == 1 and c["queued"] == 1)
        # The reserve lets critical requests past the waiter; sheddable ones find the
        # queue's one place taken.
        health = get_body(ngx.port, "/healthz?id=H")[0]
        tools = get_body(ngx.port, "/tools/x?id=T")[0]
        check((health, tools) == (200, 429), f"/healthz, /tools/x while B waits: "
              f"{health}, {tools}")
        check(backend.arrived.get("B") is None, "B passed while A held the slot")

        backend.hold("A").set()
        check(read_response(a)[0] == 200, "A failed")
        # A's permit went back before its response ended, and B was woken in that turn of
        # the event loop: C finds B in the backend and the queue's place free.
        c = send(ngx.port, "GET", "/h?id=C&hold=1")
        b_in = backend.wait("arrived", "B")
        until(ngx.port, "C waits behind B", lambda x: x["in_flight"] == 1 and x["queued"] == 1)
        check(backend.arrived.get("C") is None, "C passed before B")
        backend.hold("B").set()
        check(read_response(b)[0] == 200, "B failed")
        c_in = backend.wait("arrived", "C")
        backend.hold("C").set()
        check(read_response(c)[0] == 200, "C failed")
        check(c_in > backend.answered["B"], "C reached the backend before B answered")
        check(backend.peak <= 2, f"{backend.peak} requests in the backend at once (max 2)")
        first = (b_in - backend.answered["A"]) * 1000
        second = (c_in - backend.answered["B"]) * 1000

        cap = until(ngx.port, "all done", lambda x: x["in_flight"] == 0)
        check(cap["auto"] is False and cap["limit"] == 2, f"capacity: {cap}")
        check(cap["shed"] == {"critical": 0, "normal": 0, "sheddable": 1}, f"shed: {cap}")
        check(cap["queue_wait"]["count"] == 2, f"queue_wait: {cap}")
        queueing = ngx.error_log().count('queueing request by weir limit "backend"')
        check(queueing == 2, f"{queueing} requests queued, B and C expected")
        series = prometheus(ngx.port, promcheck)
        want = {'weir_concurrency_limit{limit="backend"}': 2,
                'weir_concurrency_shed_total{limit="backend",lane="sheddable"}': 1,
                'weir_concurrency_queue_wait_seconds_count{limit="backend"}': 2}
        check(all(series.get(k) == v for k, v in want.items()), f"weir_concurrency_*: {series}")

        # Three waiters get the slot in the order they came.
        with open(ngx.path("policy.toml"), "w") as f:
            f.write(FIXED.replace("queue = 1", "queue = 3"))
        ngx.reload()
        # The queue's state from the part before (its waiters waited long) is stale after 1 s.
        time.sleep(1.1)
        waiters = ["W1", "W2", "W3"]
        held = send(ngx.port, "GET", "/h?id=W0&hold=1")
        backend.wait("arrived", "W0")
        socks = []
        for n, w in enumerate(waiters):
            socks.append(send(ngx.port, "GET", f"/h?id={w}&hold=1"))
            until(ngx.port, f"{w} waits", lambda x, n=n: x["queued"] == n + 1)
        # Let all through at once: hand-overs a few ms apart keep the queue moving (a queue
        # whose every waiter waits over 5 ms for 100 ms stands, and then serves newest first).
        for w in ["W0"] + waiters:
            backend.hold(w).set()
        for w, sock in zip(["W0"] + waiters, [held] + socks):
            status = read_response(sock)[0]
            check(status == 200, f"{w} answered {status}")
        order = sorted(["W0"] + waiters, key=backend.arrived.get)
        if order != ["W0"] + waiters:
            # Only a hand-over slower than the standing interval (100 ms: a loaded machine,
            # ASan) lets the queue stand, which then serves the newest first.
            gap = backend.arrived[order[2]] - backend.arrived["W1"]
            check(gap > 0.1 and order == ["W0", "W1", "W3", "W2"],
                  f"the waiters reached the backend as {order} ({gap * 1000:.0f} ms apart)")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return (f"hand-over: the waiter reached the backend {first:.1f} ms and {second:.1f} ms "
            f"after the holder answered; a later arrival queued behind it; /healthz passed, "
            f"/tools/ shed while the slot was taken; three waiters served in order")


def test_standing(module, backend, env):
    ngx = Nginx(module, HTTP.replace("BACKEND", str(backend.port)), env=env,
                files={"policy.toml": STANDING})
    try:
        ngx.start()
        for i in range(8):
            check(get_body(ngx.port, f"/n?id=n{i}&ms={NOLOAD_MS}")[0] == 200, f"n{i} failed")
        until(ngx.port, "the no-load latency learned",
              lambda c: c["noload_latency_ms"] >= NOLOAD_MS * 0.8)
        # Each waiter waits 60 ms for the slot, over more than an interval (100 ms).
        prev = send(ngx.port, "GET", "/s?id=S0&hold=1")
        backend.wait("arrived", "S0")
        for i in range(1, 5):
            nxt = send(ngx.port, "GET", f"/s?id=S{i}&hold=1")
            until(ngx.port, f"S{i} waits", lambda c: c["queued"] == 1)
            time.sleep(0.06)
            backend.hold(f"S{i - 1}").set()
            check(read_response(prev)[0] == 200, f"S{i - 1} failed")
            backend.wait("arrived", f"S{i}")
            prev = nxt
        waiters = ["X1", "X2", "X3"]
        socks = []
        for n, w in enumerate(waiters):
            socks.append(send(ngx.port, "GET", f"/x?id={w}&hold=1"))
            until(ngx.port, f"{w} waits", lambda c, n=n: c["queued"] == n + 1)
        backend.hold("S4").set()
        check(read_response(prev)[0] == 200, "S4 failed")
        backend.wait("arrived", "X3")
        early = [w for w in waiters[:2] if backend.arrived.get(w) is not None]
        check(not early, f"{early} reached the backend before the newest waiter X3")
        statuses = []
        for w, sock in zip(reversed(waiters), reversed(socks)):
            backend.hold(w).set()
            statuses.append(read_response(sock)[0])
        # The older two are served next or refused early (the queue still stands; 429, the
        # limit's status).
        check(statuses[0] == 200 and all(st in (200, 429) for st in statuses[1:]),
              f"X3, X2, X1 answered {statuses}")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return f"standing: the newest of three waiters served first (then {statuses[1:]})"


DIRECTIVES = """
    weir_conn_zone $host zone=learned:64k max=auto bounds=1:1;
    weir_conn_zone $host zone=counted:64k;
    server {
        listen 127.0.0.1:%PORT% sndbuf=16k;
        location /learned/ { weir_conn learned auto; proxy_pass http://127.0.0.1:BACKEND; }
        location /counted/ { weir_conn counted 1; proxy_pass http://127.0.0.1:BACKEND; }
    }
"""


def test_directives(module, backend, env):
    """weir_conn: a zone that learns its number (held to 1 by its bounds) is free again once
    the upstream is done, while a client has read nothing; a number keeps limit_conn's
    meaning, held until the client has the whole response."""
    ngx = Nginx(module, DIRECTIVES.replace("BACKEND", str(backend.port)), env=env)
    try:
        ngx.start()
        got = {}
        for zone in ("learned", "counted"):
            s = slow_client(ngx.port, f"/{zone}/big?id={zone}&bytes={BIG}")
            backend.wait("ended", zone)
            t0 = time.monotonic()
            while (status := get_body(ngx.port, f"/{zone}/small")[0]) != 200:
                if zone == "counted" or time.monotonic() - t0 > 5:
                    break
                time.sleep(0.01)
            got[zone] = status
            check(read_slowly(s)[:2] == (200, BIG), f"{zone}: the unread response")
            check(get_body(ngx.port, f"/{zone}/small")[0] == 200,
                  f"{zone}: refused once the first response was read")
        check(got == {"learned": 200, "counted": 503},
              f"a second request while the first's client reads nothing: {got}")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return ("weir_conn auto: free once the upstream is done; weir_conn 1: held until the "
            "client has read the response")


def test_capacity(module, promcheck, env=None):
    backend = CountingBackend()
    try:
        auto = test_auto(module, promcheck, backend, env)
        hand_over = test_hand_over(module, promcheck, backend, env)
        standing = test_standing(module, backend, env)
        directives = test_directives(module, backend, env)
    finally:
        backend.stop()
    return f"{auto}; {hand_over}; {standing}; {directives}"

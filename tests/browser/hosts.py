"""The hosts and the load of the dashboard test (dashboard.py).

nginx (tests/nginx/run.py's Nginx: Debian's nginx with the weir module, policy mode) serves a
wiki behind its proxy on 127.0.0.1 and the status on a listener of its own, three times: with
key changes on (/status), read-only (/ro/status) and with changes refused by nginx's own
access rules (/guarded/status). Caddy and tower's overload_proxy come from
benches/overload/frontends.py, in front of benches/overload/backend.py.

The load: a crawler on forwarded addresses in /24 networks walks tool pages in three URL
shapes, one network after another (a network it has been refused in is left for the next, as
crawlers do), among readers; the policy's `tools-per-net` limit (one class over every shape,
keyed by /24, a ban after five rejections) rejects and bans each network. Hostile key values
(markup, quotes, a newline, U+202E, invalid UTF-8) are sent as raw bytes in a header and in
the path, for limits that show them as text.
"""

import collections
import http.client
import os
import shutil
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# (tests/nginx ahead of benches/overload, which has a run.py of its own)
sys.path.insert(0, os.path.join(HERE, "..", "..", "benches", "overload"))
sys.path.insert(0, os.path.join(HERE, "..", "nginx"))

import frontends  # noqa: E402
from run import Failure, Nginx, Redis, check, free_port  # noqa: E402
from incident import AFTER, SHAPES, http_req  # noqa: E402
from incident import LIMIT as TOOLS  # noqa: E402

TAGS = "tags"      # keyed on the X-Tag header, shown as text
PATHS = "paths"    # keyed on the path
# the crawler's networks, in the order it takes them (36.110.0, 101.89.0, 36.111.0, ...)
NET_PREFIXES = ["36.110", "101.89", "36.111", "101.90"]
PER_NET = 16  # requests per network: 6 pass (burst 5), 5 are rejected, then the ban refuses

# docs/INCIDENT.md's tightened policy (tests/nginx/incident.py: trusted proxy, per-ip, the tool
# class over every URL shape, tools-per-net by /24 with its ban) without the site-wide ceiling
# on the class, which this longer crawl would reach; and two limits whose keys the hostile
# values are, header values shown as they are.
CEILING = '[[limit]]\nname = "tools-global"'
POLICY = AFTER[:AFTER.index(CEILING)] + """
[key_text]
hide = []

[zones.tags]
size = "64k"
algorithm = "gcra"
rate = "1r/m"

[classes.tagged]
match = [{ path_prefix = "/hostile/" }]

[classes.paths]
match = [{ path_prefix = "/p/" }]

[[limit]]
name = "tags"
class = "tagged"
zone = "tags"
key = "header:x-tag"
nodelay = true

[[limit]]
name = "paths"
class = "paths"
zone = "tags"
key = "path"
nodelay = true
"""

HTTP = """
    weir_policy %DIR%/policy.toml;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        weir on;
        location / { try_files /page.html =404; }
    }
    server {
        listen 127.0.0.1:%STATUS%;
        location = /status { allow 127.0.0.1; deny all; weir_status write=on; }
        location = /ro/status { allow 127.0.0.1; deny all; weir_status; }
        location = /guarded/status { limit_except GET { deny all; } weir_status write=on; }
    }
"""


alive = frontends.alive


def descendants(pid):
    """pid's child processes, recursively."""
    out, todo = [], [pid]
    while todo:
        kids = frontends.children(todo.pop())
        out += kids
        todo += kids
    return out


class Site:
    """nginx with the module: the site on .port, the status on .status_port."""

    def __init__(self, module):
        self.status_port = free_port()
        self.ngx = Nginx(module, HTTP.replace("%STATUS%", str(self.status_port)), workers=2,
                         files={"policy.toml": POLICY, "html/page.html": "a wiki page\n"})
        self.port = self.ngx.port
        self.pids = []

    def start(self):
        self.ngx.start()
        self.pids = [self.ngx.pid] + self.ngx.workers_pids()
        return self

    def url(self, path="/status"):
        return f"http://127.0.0.1:{self.status_port}{path}"

    def error_log(self):
        return self.ngx.error_log()

    def stop(self):
        self.ngx.cleanup()
        for pid in self.pids:
            frontends.stop_pid(pid, grace=2.0)


# ---- HTTP -------------------------------------------------------------------------------------


def get(port, target, xff=None, headers=None):
    """(status, body text) of one GET on 127.0.0.1:port (incident.py's client)."""
    return http_req(port, "GET", target, xff, headers=headers)


def raw(port, target, headers=(), timeout=10):
    """The status of a GET sent as raw bytes (target and header values are bytes)."""
    lines = [b"GET " + target + b" HTTP/1.1", b"Host: localhost", b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"\r\n".join(lines) + b"\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    check(data.startswith(b"HTTP/1."), f"raw request {target!r}: {data[:200]!r}")
    return int(data.split()[1])


# ---- hostile key values -------------------------------------------------------------------

# (what, the X-Tag header's bytes)
HOSTILE_TAGS = [
    ("script", b"<script>window.__pwned=1</script>"),
    ("attribute", b'"><img src=x onerror="window.__pwned=2">'),
    ("img", b"<img/src=x/onerror=window.__pwned=3>"),
    ("entities", b"&lt;b&gt;&amp;x"),
    ("rtl", "\u202egnp.exe".encode()),
    ("bad-utf8", b"\xff\xfe\xc3(x"),
]
# (what, the request target; the path key is the decoded path): a newline only reaches a key
# through the path (`%0A`; a header value cannot hold one)
HOSTILE_PATHS = [
    ("newline", b"/p/line1%0Aline2<b>x</b>"),
    ("attribute", b"/p/%22%3E%3Cimg%20src=x%20onerror=%22window.__pwned=4%22%3E"),
    ("rtl", b"/p/%E2%80%AEfdp.exe"),
    ("bad-utf8", b"/p/\xff%FE%C3("),
]
KEEP = set(range(0x21, 0x7F)) - set(b" \"#%'()\\~")


def key_text(value):
    """A key value as docs/METRICS.md "Key text" writes it."""
    return "".join(chr(c) if c in KEEP else f"%{c:02X}" for c in value)


def unquote_path(target):
    """The path's bytes with %XX decoded (what the `path` key part holds)."""
    out, i = bytearray(), 0
    while i < len(target):
        if target[i] == 0x25:
            out.append(int(target[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(target[i])
            i += 1
    return bytes(out)


def send_hostile(port):
    """Each hostile value three times (rate 1r/m, no burst: one passes, two are rejected);
    {limit: {expected key text: what}}."""
    expect = {TAGS: {}, PATHS: {}}
    for i, (what, value) in enumerate(HOSTILE_TAGS):
        for _ in range(3):
            st = raw(port, b"/hostile/page", [(b"X-Forwarded-For", f"198.51.100.{i + 1}".encode()),
                                              (b"X-Tag", value)])
            check(st in (200, 429), f"hostile X-Tag {what}: {st}")
        expect[TAGS][key_text(value)] = what
    for i, (what, target) in enumerate(HOSTILE_PATHS):
        for _ in range(3):
            st = raw(port, target, [(b"X-Forwarded-For", f"198.51.100.{50 + i}".encode())])
            check(st in (200, 429), f"hostile path {what}: {st}")
        expect[PATHS][key_text(unquote_path(target))] = what
    return expect


# ---- the crawler and the readers --------------------------------------------------------------


class Load:
    """Background threads: crawlers walking tool pages network by network, and readers."""

    def __init__(self, port, crawlers=2, crawler_rps=24, reader_rps=8):
        self.port = port
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.next_net = 0
        self.nets = []                  # the /24s the crawler has walked, in order
        self.counts = collections.Counter()  # (kind, status) -> n
        self.errors = []
        self.threads = [threading.Thread(target=self.crawler, args=(crawler_rps,), daemon=True)
                        for _ in range(crawlers)]
        self.threads.append(threading.Thread(target=self.reader, args=(reader_rps,), daemon=True))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=15)

    def take_net(self):
        with self.lock:
            k = self.next_net
            self.next_net += 1
            net = f"{NET_PREFIXES[k % len(NET_PREFIXES)]}.{k // len(NET_PREFIXES) % 256}"
            self.nets.append(net)
            return net

    def networks(self):
        with self.lock:
            return {f"{n}.0/24" for n in self.nets}

    def one(self, kind, target, xff):
        try:
            st = get(self.port, target, xff=xff)[0]
        except (OSError, http.client.HTTPException) as e:
            st = 0
            with self.lock:
                self.errors.append(f"{kind} {target}: {e}")
        with self.lock:
            self.counts[(kind, st)] += 1

    def paced(self, rps, gen):
        """Calls each of gen's items at `rps` a second until stopped."""
        step, t = 1.0 / rps, time.monotonic()
        for item in gen:
            if self.stop_ev.is_set():
                return
            item()
            t += step
            delay = t - time.monotonic()
            if delay > 0:
                self.stop_ev.wait(delay)
            elif delay < -1:
                t = time.monotonic()

    def crawler(self, rps):
        def gen():
            n = 0
            while True:
                net = self.take_net()
                for j in range(PER_NET):
                    n += 1
                    target = SHAPES[j % len(SHAPES)].format(n)
                    yield lambda t=target, a=f"{net}.{1 + j * 7}": self.one("crawler", t, a)
        self.paced(rps, gen())

    def reader(self, rps):
        def gen():
            n = 0
            while True:
                n += 1
                yield lambda t=f"/w/Article_{n}", a=f"203.0.113.{n % 5 + 1}": \
                    self.one("reader", t, a)
                if n % 10 == 0:
                    yield lambda: self.one("health", "/healthz", None)
        self.paced(rps, gen())

    def summary(self):
        with self.lock:
            by = collections.defaultdict(dict)
            for (kind, st), n in sorted(self.counts.items()):
                by[kind][st] = n
            return dict(by), len(self.nets), list(self.errors[:3])


# ---- Caddy and tower ---------------------------------------------------------------------

OTHER_POLICY = """[zones.per_ip]
size = "64k"
algorithm = "gcra"
rate = "2r/s"

[zones.backend]
size = "64k"
algorithm = "concurrency"
max = 3

# one GCRA zone shared through Redis by Caddy and tower (the page's cluster zones)
[zones.shared]
size = "64k"
algorithm = "gcra"
rate = "20r/s"
scope = "cluster"
redis = "redis://127.0.0.1:%REDIS%/0"
expected_nodes = 2

[classes.fast]
match = [{ path_prefix = "/fast/" }]

[classes.slow]
match = [{ path_prefix = "/slow/" }]

[[limit]]
name = "per-ip"
class = "fast"
zone = "per_ip"
burst = 2
nodelay = true

[[limit]]
name = "shared"
class = "fast"
zone = "shared"
key = "global"
burst = 20
nodelay = true

[[limit]]
name = "backend"
class = "slow"
zone = "backend"
key = "global"
queue = 2
timeout = "1s"
status = 503
"""


class Others:
    """A redis-server, the backend, Caddy (when given) and tower (when given), each with
    OTHER_POLICY."""

    def __init__(self, workdir, caddy=None, tower=None):
        self.redis = Redis().start()
        self.backend = None
        self.hosts = {}
        policy = OTHER_POLICY.replace("%REDIS%", str(self.redis.port))
        try:
            self.backend = frontends.Backend(workdir, slots=50, service_ms=300, jitter=0.1)
            if caddy:
                self.hosts["caddy"] = frontends.Caddy(caddy, self.backend.port, policy)
            if tower:
                self.hosts["tower"] = frontends.Tower(tower, self.backend.port, policy)
            for h in self.hosts.values():
                h.start()
        except Exception:
            self.stop()
            raise

    def page(self, name):
        h = self.hosts[name]
        if name == "caddy":
            # The weir_status handler's site: Caddy's admin API refuses browsers' requests.
            return f"http://127.0.0.1:{h.status}/weir_status?format=html"
        return f"http://127.0.0.1:{h.port}/_weir?format=html"

    def load(self, name, stop):
        """Load on the host until the event `stop`, in threads (returned): /fast/ over its
        rate (3 clients, the backend answers in 300 ms), /slow/ over the concurrency limit of 3
        (6 clients)."""
        port = self.hosts[name].port

        def fast():
            while not stop.is_set():
                try:
                    get(port, "/fast/x")
                except (OSError, http.client.HTTPException):
                    pass
                stop.wait(0.05)

        def slow():
            while not stop.is_set():
                try:
                    st = get(port, "/slow/x")[0]
                except (OSError, http.client.HTTPException):
                    st = 0
                if st != 200:
                    stop.wait(0.1)

        ts = [threading.Thread(target=fast, daemon=True) for _ in range(3)]
        ts += [threading.Thread(target=slow, daemon=True) for _ in range(6)]
        for t in ts:
            t.start()
        return ts

    def log(self, name):
        return self.hosts[name].error_log()

    def stop(self, remove=False):
        """Stops every process; `remove`: also their temporary directories."""
        for h in self.hosts.values():
            h.stop()
        if self.backend:
            self.backend.stop()
        self.redis.cleanup()
        if remove:
            for h in self.hosts.values():
                shutil.rmtree(h.dir, ignore_errors=True)


def left_running(extra=()):
    """Processes started here (frontends' and the given pids) still running."""
    return [p for p in list(frontends.left_running()) + list(extra) if alive(p)]


__all__ = ["Failure", "check", "Site", "Load", "Others", "send_hostile", "get", "key_text"]

"""An open-loop HTTP/1.1 load generator (asyncio, Python 3 standard library only).

Arrivals follow a schedule per lane, never the responses: a lane fires its requests at its
rate whether or not earlier ones were answered. Each request takes an idle keep-alive
connection from a pool or opens a new one, so a slow answer never delays the next arrival;
a lane may cap the connections it holds open at once (`max_conns`), and an arrival that
finds the cap reached is not sent and is counted as `skipped`. A request that has no
answer within its lane's timeout is abandoned: its connection is reset (no TIME_WAIT) and
it counts as `timeout`.

Outcomes are counted per second (of completion) and lane in `Recorder`:
  ok       2xx           (latency kept: the admitted latency)
  rejected 429 or 503    (latency kept: how fast the refusal came)
  error    any other status, a refused or reset connection
  timeout  no answer within the lane's timeout
  skipped  not sent: the lane's connection cap was reached
"""

import asyncio
import math
import socket
import struct
import time

LINGER_RESET = struct.pack("ii", 1, 0)


class Lane:
    """A stream of requests: `rate` is [(from_second, requests_per_second), ...] (the last
    entry at or before t applies); `path` is a format string given the request's number."""

    def __init__(self, name, path, rate, timeout=5.0, max_conns=None, fresh_conn=False):
        self.name = name
        self.path = path
        self.rate = sorted(rate)
        self.timeout = timeout
        self.max_conns = max_conns
        self.fresh_conn = fresh_conn  # a new connection per request (a load balancer's probe)
        self.open = 0
        self.sent = 0

    def rate_at(self, t):
        r = 0.0
        for start, rps in self.rate:
            if t >= start:
                r = rps
        return r


class Bucket:
    __slots__ = ("sent", "ok", "rejected", "error", "timeout", "skipped", "ok_ms", "rej_ms",
                 "target")

    def __init__(self):
        self.sent = self.ok = self.rejected = self.error = self.timeout = self.skipped = 0
        self.ok_ms = []
        self.rej_ms = []
        self.target = 0.0


class Recorder:
    """Per-second, per-lane counts; second k covers [k, k+1) after the start."""

    def __init__(self, lanes):
        self.lanes = [lane.name for lane in lanes]
        self.seconds = []  # [{lane: Bucket}]
        self.t0 = None

    def bucket(self, lane, t):
        k = max(0, int(t))
        while len(self.seconds) <= k:
            self.seconds.append({name: Bucket() for name in self.lanes})
        return self.seconds[k][lane]

    def done(self, lane, t, outcome, ms=None):
        b = self.bucket(lane, t)
        setattr(b, outcome, getattr(b, outcome) + 1)
        if outcome == "ok":
            b.ok_ms.append(ms)
        elif outcome == "rejected":
            b.rej_ms.append(ms)

    def totals(self, lane, first=0, last=None):
        """One Bucket summing seconds [first, last)."""
        out = Bucket()
        for sec in self.seconds[first:last]:
            b = sec[lane]
            for f in ("sent", "ok", "rejected", "error", "timeout", "skipped", "target"):
                setattr(out, f, getattr(out, f) + getattr(b, f))
            out.ok_ms.extend(b.ok_ms)
            out.rej_ms.extend(b.rej_ms)
        return out


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


class Response(asyncio.Protocol):
    """One client connection; answers one request at a time."""

    def __init__(self, pool):
        self.pool = pool
        self.transport = None
        self.buf = b""
        self.waiter = None
        self.closed = False

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self.waiter and not self.waiter.done():
            self.waiter.set_exception(ConnectionResetError("connection closed"))

    def request(self, data, loop):
        self.buf = b""
        self.waiter = loop.create_future()
        self.transport.write(data)
        return self.waiter

    def data_received(self, data):
        self.buf += data
        w = self.waiter
        if w is None or w.done():
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1").split("\r\n")
        try:
            status = int(head[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            w.set_exception(ConnectionResetError("bad status line"))
            return
        length, chunked, keep = None, False, not head[0].startswith("HTTP/1.0")
        for line in head[1:]:
            k, _, v = line.partition(":")
            k = k.strip().lower()
            if k == "content-length":
                length = int(v.strip())
            elif k == "transfer-encoding" and "chunked" in v.lower():
                chunked = True
            elif k == "connection":
                keep = v.strip().lower() != "close"
        body = self.buf[end + 4:]
        if chunked:
            if not body.endswith(b"0\r\n\r\n"):
                return
        elif length is None:
            keep = False  # body until close: not used by the hosts here
        elif len(body) < length:
            return
        w.set_result((status, keep))


class Pool:
    """Idle keep-alive connections to one address."""

    def __init__(self, host, port):
        self.host = host
        self.port = port
        self.idle = []

    async def get(self, loop, fresh):
        while self.idle and not fresh:
            conn = self.idle.pop()
            if not conn.closed and not conn.transport.is_closing():
                return conn
        _, conn = await loop.create_connection(lambda: Response(self), self.host, self.port)
        return conn

    def put(self, conn):
        if not conn.closed and not conn.transport.is_closing():
            self.idle.append(conn)


def reset(conn):
    """Closes with a RST: an abandoned request leaves no TIME_WAIT behind."""
    if conn is None or conn.transport is None or conn.closed:
        return
    sock = conn.transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
        except OSError:
            pass
    conn.transport.abort()


class Generator:
    """Runs the lanes against host:port for `seconds`; `tick` is the scheduling period."""

    def __init__(self, host, port, lanes, recorder, tick=0.002, host_header="localhost"):
        self.pool = Pool(host, port)
        self.lanes = lanes
        self.rec = recorder
        self.tick = tick
        self.host_header = host_header
        self.tasks = set()
        self.t0 = None
        self.loop = None
        self.max_gap = 0.0  # the longest the scheduler went without running (bunched arrivals)
        self.cpu_s = 0.0  # this process's CPU time during the run

    def now(self):
        return self.loop.time() - self.t0

    async def run(self, seconds, t0=None):
        self.loop = asyncio.get_running_loop()
        self.t0 = t0 if t0 is not None else self.loop.time()
        # each lane's first request goes at once, the next ones at its rate
        credit = {lane.name: 0.999 for lane in self.lanes}
        last = 0.0
        cpu0 = time.process_time()
        while True:
            t = self.now()
            if t >= seconds:
                break
            dt = t - last
            last = t
            self.max_gap = max(self.max_gap, dt)
            for lane in self.lanes:
                r = lane.rate_at(t)
                credit[lane.name] += r * dt
                self.rec.bucket(lane.name, t).target += r * dt
                while credit[lane.name] >= 1.0:
                    credit[lane.name] -= 1.0
                    self.fire(lane, t)
            await asyncio.sleep(self.tick)
        self.cpu_s = time.process_time() - cpu0
        # the last arrivals get their lane's timeout to finish
        if self.tasks:
            await asyncio.wait(set(self.tasks))

    def fire(self, lane, t):
        lane.sent += 1
        if lane.max_conns is not None and lane.open >= lane.max_conns:
            self.rec.done(lane.name, t, "skipped")
            return
        self.rec.bucket(lane.name, t).sent += 1
        task = self.loop.create_task(self.one(lane, lane.path.format(n=lane.sent), t))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def one(self, lane, path, t_arrival):
        lane.open += 1
        conn = None
        deadline = self.t0 + t_arrival + lane.timeout
        data = (f"GET {path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
                f"{'Connection: close' + chr(13) + chr(10) if lane.fresh_conn else ''}"
                f"User-Agent: weir-overload\r\n\r\n").encode("latin-1")
        outcome, ms = "error", None
        try:
            async with asyncio.timeout_at(deadline):
                conn = await self.pool.get(self.loop, lane.fresh_conn)
                status, keep = await conn.request(data, self.loop)
            ms = (self.loop.time() - self.t0 - t_arrival) * 1000
            if 200 <= status < 300:
                outcome = "ok"
            elif status in (429, 503):
                outcome = "rejected"
            if keep and not lane.fresh_conn:
                self.pool.put(conn)
            else:
                conn.transport.close()
        except TimeoutError:
            outcome = "timeout"
            reset(conn)
        except OSError:
            reset(conn)
        finally:
            lane.open -= 1
        self.rec.done(lane.name, self.now(), outcome, ms)

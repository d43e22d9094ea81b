#!/usr/bin/env python3
"""A backend with a fixed number of worker slots, like an application server (puma, unicorn,
gunicorn sync workers) behind a reverse proxy.

Each request holds one of N slots for the service time; requests beyond N wait inside the
backend in arrival order (the application server's own queue). A queued request is served
even when its client has gone away meanwhile: its slot time is spent and the answer is
written to a closed connection, as an application server does. That queue is what a
concurrency limit in front must keep empty.

  backend.py --port P [--slots 20] [--service-ms 50] [--health-ms 2] [--jitter 0.1]
             [--pid-file F] [--schedule "20:slots=10;40:slots=20,service_ms=50"]

HTTP/1.1 with keep-alive. Routes:
  GET  /_stats    JSON {in_flight, busy, queued, max_in_flight, max_busy, completed,
                  abandoned, slots, service_ms, uptime_s}; max_* are since the previous read,
                  in_flight = busy + queued. Answered at once, holds no slot.
  POST /_control?slots=N&service_ms=M   changes either at once (running requests finish
                  with the service time they started with). Holds no slot.
  GET  /healthz   takes a slot like any request, for --health-ms.
  anything else   takes a slot for the service time (±jitter), then 200.

--schedule applies changes at seconds after start: "T:name=v,name=v;T:...".
Python 3 standard library only.
"""

import argparse
import asyncio
import collections
import json
import os
import random
import signal
import sys
import time
import urllib.parse

MAX_HEAD = 16384


class Slots:
    """The slots and the queue in front of them (one per backend)."""

    def __init__(self, slots, service_ms, health_ms, jitter):
        self.slots = slots
        self.service_ms = service_ms
        self.health_ms = health_ms
        self.jitter = jitter
        self.busy = 0
        self.queue = collections.deque()
        self.max_in_flight = 0
        self.max_busy = 0
        self.completed = 0
        self.abandoned = 0
        self.started = time.monotonic()
        self.loop = None

    @property
    def in_flight(self):
        return self.busy + len(self.queue)

    def submit(self, conn, health):
        self.queue.append((conn, health))
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.dispatch()

    def dispatch(self):
        while self.queue and self.busy < self.slots:
            conn, health = self.queue.popleft()
            self.busy += 1
            self.max_busy = max(self.max_busy, self.busy)
            ms = self.health_ms if health else self.service_ms
            if self.jitter and not health:
                ms *= 1 + random.uniform(-self.jitter, self.jitter)
            self.loop.call_later(ms / 1000, self.finish, conn)

    def finish(self, conn):
        self.busy -= 1
        self.completed += 1
        if not conn.answer(200, b"ok\n"):
            self.abandoned += 1
        self.dispatch()

    def stats(self):
        out = {
            "in_flight": self.in_flight,
            "busy": self.busy,
            "queued": len(self.queue),
            "max_in_flight": self.max_in_flight,
            "max_busy": self.max_busy,
            "completed": self.completed,
            "abandoned": self.abandoned,
            "slots": self.slots,
            "service_ms": self.service_ms,
            "uptime_s": round(time.monotonic() - self.started, 3),
        }
        self.max_in_flight = self.in_flight
        self.max_busy = self.busy
        return out

    def control(self, params):
        """Applies slots= / service_ms= / health_ms= / jitter=; the error text or None."""
        try:
            for name, value in params.items():
                if name == "slots":
                    v = int(value)
                    if v < 1:
                        return "slots must be at least 1"
                    self.slots = v
                elif name in ("service_ms", "health_ms", "jitter"):
                    v = float(value)
                    if v < 0:
                        return f"{name} must not be negative"
                    setattr(self, name, v)
                else:
                    return f"unknown setting {name}"
        except ValueError as e:
            return str(e)
        self.dispatch()
        return None


class Conn(asyncio.Protocol):
    """One client connection: reads requests one at a time (no pipelining needed), keeps the
    connection for the next request unless the client asked to close it."""

    def __init__(self, slots):
        self.slots = slots
        self.transport = None
        self.buf = b""
        self.closed = False
        self.busy = False  # a request of this connection is queued or being served
        self.keep = True

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True

    def data_received(self, data):
        self.buf += data
        if not self.busy:
            self.next_request()

    def next_request(self):
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                self.answer(431, b"header too large\n", close=True)
            return
        head = self.buf[:end].decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            self.answer(400, b"bad request line\n", close=True)
            return
        method, target, version = parts
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0") or 0)
        if len(self.buf) < end + 4 + length:
            return
        self.buf = self.buf[end + 4 + length:]
        conn_hdr = headers.get("connection", "").lower()
        self.keep = not (conn_hdr == "close" or (version == "HTTP/1.0" and conn_hdr != "keep-alive"))
        path, _, query = target.partition("?")
        self.busy = True
        if path == "/_stats":
            self.answer(200, json.dumps(self.slots.stats()).encode(), "application/json")
        elif path == "/_control":
            if method != "POST":
                self.answer(405, b"POST only\n")
                return
            params = dict(urllib.parse.parse_qsl(query))
            err = self.slots.control(params)
            if err:
                self.answer(400, (err + "\n").encode())
            else:
                self.answer(200, json.dumps(self.slots.stats()).encode(), "application/json")
        else:
            self.slots.submit(self, path == "/healthz")

    def answer(self, status, body, ctype="text/plain", close=False):
        """Writes a response; False when the client had already gone."""
        self.busy = False
        if self.closed or self.transport.is_closing():
            return False
        keep = self.keep and not close
        reason = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large"}.get(status, "Status")
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\n"
                f"{'' if keep else 'Connection: close' + chr(13) + chr(10)}\r\n")
        self.transport.write(head.encode("latin-1") + body)
        if not keep:
            self.transport.close()
            return True
        if self.buf:
            self.next_request()
        return True


def parse_schedule(text):
    """ "20:slots=10;40:slots=20,service_ms=50" -> [(20.0, {"slots": "10"}), ...]"""
    out = []
    for item in filter(None, (s.strip() for s in (text or "").split(";"))):
        at, _, settings = item.partition(":")
        params = dict(kv.split("=", 1) for kv in settings.split(",") if kv)
        out.append((float(at), params))
    return sorted(out, key=lambda e: e[0])


async def main(args):
    loop = asyncio.get_running_loop()
    slots = Slots(args.slots, args.service_ms, args.health_ms, args.jitter)
    slots.loop = loop
    server = await loop.create_server(lambda: Conn(slots), args.host, args.port,
                                      backlog=4096, reuse_address=True)
    for at, params in parse_schedule(args.schedule):
        loop.call_later(at, slots.control, params)
    if args.pid_file:
        with open(args.pid_file + ".tmp", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(args.pid_file + ".tmp", args.pid_file)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"backend: 127.0.0.1:{args.port}, {args.slots} slots x {args.service_ms} ms",
          file=sys.stderr, flush=True)
    await stop.wait()
    server.close()


def cli():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--slots", type=int, default=20)
    p.add_argument("--service-ms", type=float, default=50.0)
    p.add_argument("--health-ms", type=float, default=2.0,
                   help="slot time of GET /healthz (default 2)")
    p.add_argument("--jitter", type=float, default=0.1,
                   help="service time varies uniformly by this fraction (default 0.1)")
    p.add_argument("--schedule", default="")
    p.add_argument("--pid-file")
    args = p.parse_args()
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    asyncio.run(main(args))


if __name__ == "__main__":
    cli()

#!/usr/bin/env python3
"""weir's overload harness: each scenario through each front end, on loopback.

  python3 benches/overload/run.py [--seconds 60 | --quick] [--scenarios a,b] [--fronts x,y]
                                  [--module target/nginx/ngx_http_weir_module.so]
                                  [--caddy target/caddy/caddy] [--tower BINARY] [--out DIR]

Per run: a fresh backend (backend.py, its own process), the front end (none, nginx with the
weir module and a hand-set `max`, nginx with `max = "auto"`, Caddy and tower where built), the
open-loop load (load.py) with health checks; a line per second, then OUT/SCENARIO.FRONT.csv
and .svg. At the end a table of every run (also OUT/summary.md). README.md tells how to read it.
Python 3 standard library only.
"""

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ beside the sources

import frontends  # noqa: E402
import report  # noqa: E402
import scenarios  # noqa: E402
from load import Generator, Recorder, percentile  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
FRONTS = ["none", "nginx-fixed", "nginx-auto", "caddy-fixed", "caddy-auto", "tower-fixed",
          "tower-auto"]


class Skip(Exception):
    pass


def features(opts):
    """What the weir build accepts: {"auto": bool, "lanes": bool} (from `nginx -t`)."""
    if not os.path.exists(opts.module):
        return {"auto": False, "lanes": False}
    return {"auto": frontends.nginx_accepts(opts.module, frontends.PROBE_AUTO),
            "lanes": frontends.nginx_accepts(opts.module, frontends.PROBE_LANES)}


def check_available(kind, scenario, opts, feats):
    """Raises Skip when front end `kind` cannot run `scenario` here."""
    if kind == "none":
        return
    if kind not in FRONTS:
        raise SystemExit(f"unknown front end {kind}; known: {', '.join(FRONTS)}")
    host, mode = kind.split("-")
    if mode == "auto" and not feats["auto"]:
        raise Skip('this weir build does not accept max = "auto" yet')
    if host == "nginx" and not os.path.exists(opts.module):
        raise Skip(f"no nginx module at {opts.module} (make nginx-module)")
    if host in ("caddy", "tower") and not scenario.all_hosts:
        raise Skip(f"{host} runs the steady-* and incident scenarios only")
    if host == "caddy" and not (opts.caddy and os.path.exists(opts.caddy)):
        raise Skip(f"no Caddy binary at {opts.caddy} (make caddy)")
    if host == "tower" and not (opts.tower and os.path.exists(opts.tower)):
        raise Skip(f"no tower proxy at {opts.tower} "
                   "(cargo build --release -p weir-tower --example overload_proxy)")


def make_front(kind, scenario, backend_port, opts, feats):
    """The front end of `kind`, not started; Skip when it cannot run here."""
    check_available(kind, scenario, opts, feats)
    if kind == "none":
        return frontends.Direct(backend_port)
    host, mode = kind.split("-")
    limit = "auto" if mode == "auto" else (opts.fixed_max or scenario.slots)
    policy = frontends.policy_text(limit, feats["lanes"], opts.queue, opts.queue_timeout,
                                   bounds=opts.bounds)
    if host == "nginx":
        return frontends.Nginx(opts.module, backend_port, policy, workers=opts.nginx_workers)
    if host == "caddy":
        return frontends.Caddy(opts.caddy, backend_port, policy)
    return frontends.Tower(opts.tower, backend_port, policy)


def http_json(method, url, timeout=0.5):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def sample(backend, front, fixed_limit):
    """One reading of the backend's /_stats and the front end's JSON status."""
    out = {}
    try:
        st = http_json("GET", f"http://127.0.0.1:{backend.port}/_stats")
        out.update(be_in_flight=st["in_flight"], be_max_in_flight=st["max_in_flight"],
                   be_max_busy=st["max_busy"], be_completed=st["completed"],
                   be_abandoned=st["abandoned"])
    except (OSError, ValueError, KeyError):
        pass
    cap = frontends.read_capacity(front.status_url) if front.status_url else None
    if cap and cap.get("limit") is not None:
        out.update(limit=cap["limit"], limit_source="status", fe_in_flight=cap.get("in_flight"),
                   fe_queued=cap.get("queued"), fe_noload_ms=cap.get("noload_latency_ms"),
                   fe_latency_ms=cap.get("latency_ms"))
    elif fixed_limit is not None:
        out.update(limit=fixed_limit, limit_source="policy")
    return out


def line(k, rec, s, lanes):
    """The per-second console line."""
    sec = rec.seconds[k] if k < len(rec.seconds) else {}
    app = [sec[n] for n in lanes if n in report.APP_LANES and n in sec]
    ok_ms = [v for b in app for v in b.ok_ms]
    p50, p99 = percentile(ok_ms, 50), percentile(ok_ms, 99)
    rej = " ".join(f"{n[0]}:{sec[n].rejected}" for n in lanes if n in report.APP_LANES and n in sec)
    h = sec.get("health")
    lim = s.get("limit")
    return (f"{k:3d}s limit {'-' if lim is None else lim:>4} in flight "
            f"{s.get('be_in_flight', '?'):>4} (max {s.get('be_max_in_flight', '?'):>4}) "
            f"goodput {sum(b.ok for b in app):4d}/s  p50 {fmt_ms(p50)} p99 {fmt_ms(p99)}  "
            f"rejected {rej}  timeouts {sum(b.timeout for b in app)}  "
            f"health {h.ok if h else 0}/{h.sent if h else 0}  "
            f"sent {sum(b.sent for b in app)}/{sum(b.target for b in app):.0f}")


def fmt_ms(v):
    return "   -" if v is None else f"{v:4.0f}ms"


async def drive(scenario, backend, front, seconds, fixed_limit, quiet):
    """The load, the backend changes and the per-second samples; (recorder, samples)."""
    loop = asyncio.get_running_loop()
    lanes = scenario.lanes_for(seconds)
    rec = Recorder(lanes)
    gen = Generator("127.0.0.1", front.port, lanes, rec)
    t0 = loop.time() + 0.2
    samples = []
    names = [lane.name for lane in lanes]

    async def sampler():
        sample(backend, front, fixed_limit)  # resets the backend's max since the last read
        for k in range(int(math.ceil(seconds))):
            await asyncio.sleep(max(0.0, t0 + k + 1 - loop.time()))
            s = await loop.run_in_executor(None, sample, backend, front, fixed_limit)
            samples.append(s)
            if not quiet:
                print(line(k, rec, s, names), flush=True)

    async def change(at, params):
        await asyncio.sleep(max(0.0, t0 + at - loop.time()))
        q = "&".join(f"{k}={v}" for k, v in params.items())
        await loop.run_in_executor(None, http_json, "POST",
                                   f"http://127.0.0.1:{backend.port}/_control?{q}", 2.0)
        if not quiet:
            print(f"      backend: {q}", flush=True)

    side = [asyncio.ensure_future(sampler())]
    side += [asyncio.ensure_future(change(at, p)) for at, p in scenario.changes_at(seconds)]
    try:
        await gen.run(seconds, t0)
        await asyncio.wait_for(asyncio.gather(*side), timeout=5)
    finally:
        for task in side:
            task.cancel()
    gen_stats = {"gen_cpu_pct": 100.0 * gen.cpu_s / seconds, "gen_max_gap_ms": 1000 * gen.max_gap}
    return rec, samples, gen_stats


def run_one(scenario, kind, seconds, opts, feats, out_dir):
    """One scenario through one front end: its summary (with the csv/svg paths) or Skip."""
    work = tempfile.mkdtemp(prefix="weir-overload-")
    backend = front = None
    fixed_limit = None
    try:
        backend = frontends.Backend(work, scenario.slots, scenario.service_ms)
        front = make_front(kind, scenario, backend.port, opts, feats)
        if kind.endswith("-fixed"):
            fixed_limit = opts.fixed_max or scenario.slots
        front.start()
        rec, samples, gen_stats = asyncio.run(drive(scenario, backend, front, seconds,
                                                    fixed_limit, opts.quiet))
        log = front.error_log()
    finally:
        if front is not None:
            front.stop()
            if getattr(front, "dir", None) and front.dir != work:
                shutil.rmtree(front.dir, ignore_errors=True)
        if backend is not None:
            backend.stop()
        shutil.rmtree(work, ignore_errors=True)
    table = report.rows(rec, samples, scenario, seconds)
    base = os.path.join(out_dir, f"{scenario.name}.{kind}")
    report.write_csv(base + ".csv", table)
    report.write_svg(base + ".svg", table, f"{scenario.name} via {kind}: {scenario.title}")
    s = report.summary(rec, table, scenario, seconds, kind)
    s.update(csv=base + ".csv", svg=base + ".svg", host_log=log[-2000:], table=table, **gen_stats)
    return s


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="each run's length (default 60)")
    p.add_argument("--quick", action="store_true", help="15 s runs (overrides --seconds)")
    p.add_argument("--scenarios", default=",".join(s.name for s in scenarios.all_scenarios()))
    p.add_argument("--fronts", default=",".join(FRONTS))
    p.add_argument("--module", default=os.path.join(ROOT, "target/nginx/ngx_http_weir_module.so"))
    p.add_argument("--caddy", default=os.path.join(ROOT, "target/caddy/caddy"))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    p.add_argument("--tower", default=os.path.join(target, "release/examples/overload_proxy"))
    p.add_argument("--nginx-workers", type=int, default=1)
    p.add_argument("--fixed-max", type=int, help="the hand-set max (default: the backend's slots)")
    p.add_argument("--queue", type=int, default=20, help="the limit's queue (default 20)")
    p.add_argument("--queue-timeout", type=float, default=1.0, help="seconds (default 1)")
    p.add_argument("--bounds", default="2,400", help='max = "auto" bounds (default 2,400)')
    p.add_argument("--out", default=os.path.join(ROOT, "target/overload"))
    p.add_argument("--quiet", action="store_true", help="no per-second lines")
    opts = p.parse_args(argv)
    if opts.quick:
        opts.seconds = 15.0
    opts.bounds = [int(x) for x in opts.bounds.split(",")] if opts.bounds else None
    return opts


def raise_nofile():
    try:
        import resource
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass


def run_all(opts, feats):
    """Every scenario through every front end; the summaries of the runs that happened."""
    results = []
    for sc in scenarios.by_name(opts.scenarios.split(",")):
        for kind in opts.fronts.split(","):
            try:
                check_available(kind, sc, opts, feats)
            except Skip as e:
                print(f"-- {sc.name} via {kind}: skipped: {e}", flush=True)
                continue
            print(f"\n== {sc.name} via {kind}: {sc.title}; {sc.slots} slots x {sc.service_ms:g} "
                  f"ms = {sc.capacity:.0f} req/s, {opts.seconds:g} s", flush=True)
            try:
                s = run_one(sc, kind, opts.seconds, opts, feats, opts.out)
            except frontends.StartError as e:
                print(f"   could not start: {e}", flush=True)
                continue
            results.append(s)
            print(f"   generator: {s['gen_cpu_pct']:.0f}% of a core, longest scheduling gap "
                  f"{s['gen_max_gap_ms']:.0f} ms; sent {s['sent_rps']:.0f}/s of "
                  f"{s['target_rps']:.0f}/s\n   -> {s['csv']}\n   -> {s['svg']}", flush=True)
            time.sleep(1)
    return results


def main():
    opts = parse()
    # SIGTERM ends the run like Ctrl-C: every started process is stopped on the way out
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    raise_nofile()
    os.makedirs(opts.out, exist_ok=True)
    feats = features(opts)
    print(f"weir build: max = \"auto\" {'accepted' if feats['auto'] else 'not accepted'}, "
          f"lanes {'accepted' if feats['lanes'] else 'not accepted'}", flush=True)
    try:
        results = run_all(opts, feats)
    finally:
        frontends.stop_all()
    text = report.table_text(results)
    with open(os.path.join(opts.out, "summary.md"), "w") as f:
        f.write(text + "\n\nPlots (per-second CSVs beside them) and the generator's share of a "
                "core and longest scheduling gap:\n\n")
        for s in results:
            f.write(f"- {s['svg']}: {s['gen_cpu_pct']:.0f}%, {s['gen_max_gap_ms']:.0f} ms\n")
    print("\n" + text)
    print(f"\n(table in {os.path.join(opts.out, 'summary.md')})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The overload harness's smoke test (make overload-smoke): scenario steady-2x for a few
seconds through nginx with the weir module, once with a hand-set `max` and once with
`max = "auto"` when this weir build accepts it. Asserts behaviour, not speed:

  - every health check (GET /healthz every 0.5 s, 2 s timeout) passed;
  - fixed max: the backend never held more than max + 1 requests at once (the + 1: a health
    check, which the policy exempts when the build has no lanes);
  - `max = "auto"`: never more than the upper bound + 1;
  - requests were refused with 429/503, some of them sooner than one backend service time
    (refused at the door, not after waiting for a slot);
  - the CSV (a row per second) and the SVG were written; nginx logged no alert;
  - every process the test started is gone afterwards.

Exits non-zero on the first failed check; stops everything it started, on failure too, and
gives up after --deadline seconds (default 55).
"""

import argparse
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ beside the sources

import frontends  # noqa: E402
import run  # noqa: E402
import scenarios  # noqa: E402


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def verify(s, sc, kind, opts, seconds):
    table = s["table"]
    where = f"{sc.name} via {kind}"
    check(len(table) >= int(seconds) - 1, f"{where}: {len(table)} rows for {seconds:g} s")
    for path in (s["csv"], s["svg"]):
        check(os.path.exists(path) and os.path.getsize(path) > 0, f"{where}: {path} not written")
    with open(s["svg"]) as f:
        svg = f.read()
    check(svg.startswith("<svg") and svg.rstrip().endswith("</svg>"), f"{where}: bad SVG")
    with open(s["csv"]) as f:
        check(len(f.read().splitlines()) == len(table) + 1, f"{where}: CSV rows")
    check(s["health_sent"] >= 2 * int(seconds) - 2,
          f"{where}: only {s['health_sent']} health checks sent")
    check(s["health_pct"] == 100.0,
          f"{where}: health checks passed {s['health_pct']:.1f}% of {s['health_sent']}")
    if kind.endswith("-fixed"):
        bound = (opts.fixed_max or sc.slots) + 1
    else:
        bound = opts.bounds[1] + 1
    peaks = [r["be_max_in_flight"] for r in table if r["be_max_in_flight"] is not None]
    check(len(peaks) >= len(table) - 1, f"{where}: backend stats missing: {peaks}")
    check(max(peaks) <= bound,
          f"{where}: the backend held {max(peaks)} requests at once, limit + 1 is {bound}")
    rejected = [r for r in table if r["rejected_rps"]]
    total = sum(r["rejected_rps"] for r in table)
    check(total > 0, f"{where}: nothing was refused at 2x capacity")
    fast = [r for r in rejected if r["reject_p50_ms"] is not None
            and r["reject_p50_ms"] < sc.service_ms]
    check(fast, f"{where}: every refusal took longer than the service time "
                f"({[r['reject_p50_ms'] for r in rejected]} ms)")
    bad = [ln for ln in s["host_log"].splitlines() if "[alert]" in ln or "[emerg]" in ln
           or "[crit]" in ln]
    check(not bad, f"{where}: nginx logged:\n" + "\n".join(bad[:5]))
    return (f"{where}: {s['sent_rps']:.0f}/{s['target_rps']:.0f} req/s sent, goodput "
            f"{s['goodput_pct']:.0f}% of capacity, shed {s['shed_pct']:.0f}%, refusal p50 "
            f"{s['reject_p50_ms']:.1f} ms, backend peak {max(peaks)} (bound {bound}), "
            f"health {s['health_pct']:.0f}% of {s['health_sent']}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--deadline", type=float, default=55.0)
    known, rest = p.parse_known_args()
    if not any(a == "--out" or a.startswith("--out=") for a in rest):
        rest += ["--out", os.path.join(run.ROOT, "target/overload-smoke")]
    opts = run.parse(rest + ["--quiet"])
    if not os.path.exists(opts.module):
        sys.exit(f"overload-smoke: no module at {opts.module} (make nginx-module)")

    def give_up(signum, _frame):
        raise SystemExit(f"overload-smoke: stopped by signal {signum} (deadline "
                         f"{known.deadline:g} s)")

    signal.signal(signal.SIGTERM, give_up)
    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(int(known.deadline))
    run.raise_nofile()
    os.makedirs(opts.out, exist_ok=True)
    started = []
    try:
        feats = run.features(opts)
        sc = scenarios.by_name(["steady-2x"])[0]
        kinds = ["nginx-fixed"] + (["nginx-auto"] if feats["auto"] else [])
        if not feats["auto"]:
            print('overload-smoke: this weir build does not accept max = "auto": fixed only')
        for kind in kinds:
            s = run.run_one(sc, kind, known.seconds, opts, feats, opts.out)
            started.append(s)
            print("overload-smoke: " + verify(s, sc, kind, opts, known.seconds), flush=True)
    except (Failure, frontends.StartError) as e:
        print(f"overload-smoke: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        signal.alarm(0)
        frontends.stop_all()
        left = frontends.left_running()
    if left:
        print(f"overload-smoke: FAILED: processes left running: {left}", file=sys.stderr)
        sys.exit(1)
    print(f"overload-smoke: passed ({len(started)} runs; files in {opts.out})")


if __name__ == "__main__":
    main()

"""Per-second rows, the CSV and SVG of a run, its summary, and the table of all runs."""

import csv
import math
from xml.sax.saxutils import escape

from load import percentile

APP_LANES = ("normal", "critical", "sheddable")
LANE_FIELDS = ("target", "sent", "ok", "rejected", "timeout", "error", "skipped")


def rows(rec, samples, scenario, seconds):
    """One dict per second of the run (the CSV's rows)."""
    out = []
    n = min(len(rec.seconds), int(math.ceil(seconds)))
    lanes = [name for name in rec.lanes]
    for k in range(n):
        sec = rec.seconds[k]
        s = samples[k] if k < len(samples) and samples[k] else {}
        slots, service = scenario.slots_service_at(k + 0.5, seconds)
        row = {"t": k, "slots": slots, "service_ms": service,
               "capacity_rps": round(slots * 1000 / service, 1),
               "limit": s.get("limit"), "limit_source": s.get("limit_source"),
               "fe_in_flight": s.get("fe_in_flight"), "fe_queued": s.get("fe_queued"),
               "fe_noload_ms": rnd(s.get("fe_noload_ms")), "fe_latency_ms": rnd(s.get("fe_latency_ms")),
               "be_in_flight": s.get("be_in_flight"), "be_max_in_flight": s.get("be_max_in_flight"),
               "be_max_busy": s.get("be_max_busy"), "be_completed": s.get("be_completed"),
               "be_abandoned": s.get("be_abandoned")}
        app = [sec[name] for name in lanes if name in APP_LANES]
        ok_ms = [v for b in app for v in b.ok_ms]
        rej_ms = [v for b in app for v in b.rej_ms]
        row["offered_rps"] = round(sum(b.target for b in app), 1)
        row["sent_rps"] = sum(b.sent for b in app)
        row["goodput_rps"] = sum(b.ok for b in app)
        row["rejected_rps"] = sum(b.rejected for b in app)
        row["timeout_rps"] = sum(b.timeout for b in app)
        row["skipped_rps"] = sum(b.skipped for b in app)
        row["p50_ms"] = rnd(percentile(ok_ms, 50))
        row["p99_ms"] = rnd(percentile(ok_ms, 99))
        row["reject_p50_ms"] = rnd(percentile(rej_ms, 50))
        for name in lanes:
            b = sec[name]
            for f in LANE_FIELDS:
                v = getattr(b, f)
                row[f"{name}_{f}"] = round(v, 1) if f == "target" else v
        out.append(row)
    return out


def rnd(v):
    return None if v is None else round(v, 1)


def write_csv(path, table):
    if not table:
        return
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0].keys()))
        w.writeheader()
        for r in table:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})


def convergence(table, scenario, seconds, band=0.25, hold=3):
    """Seconds from the start and from each backend change until the limit is within ±band of
    the backend's slots for `hold` seconds in a row: "a/b/c", "never" per phase; None when
    no limit is known."""
    if not table or all(r["limit"] is None for r in table):
        return None
    starts = [0.0] + [at for at, _ in scenario.changes_at(seconds)]
    ends = starts[1:] + [len(table)]
    parts = []
    for start, end in zip(starts, ends):
        run, found = 0, None
        for r in table[int(math.ceil(start)):int(end)]:
            lim = r["limit"]
            ok = lim is not None and abs(lim - r["slots"]) <= band * r["slots"]
            run = run + 1 if ok else 0
            if run >= hold:
                found = r["t"] - hold + 1 - start
                break
        parts.append("never" if found is None else f"{max(0.0, found):.0f}s")
    return "/".join(parts)


def drift(table, scenario):
    """How far the limit moved from the end of the first minute to the end of the run, in %
    (the mean over seconds 50-60 against the last 10): runs of 2 minutes or more without
    backend changes only, else None."""
    if len(table) < 120 or scenario.changes:
        return None
    first = [r["limit"] for r in table[50:60] if r["limit"] is not None]
    last = [r["limit"] for r in table[-10:] if r["limit"] is not None]
    if not first or not last:
        return None
    a, b = sum(first) / len(first), sum(last) / len(last)
    return 100.0 * (b - a) / a


def summary(rec, table, scenario, seconds, front):
    app = [rec.totals(name) for name in rec.lanes if name in APP_LANES]
    good = sum(r["goodput_rps"] for r in table)
    sent = sum(b.sent for b in app)
    target = sum(b.target for b in app)
    servable = sum(min(r["offered_rps"], r["capacity_rps"]) for r in table)
    ok_ms = [v for b in app for v in b.ok_ms]
    rej_ms = [v for b in app for v in b.rej_ms]
    health = rec.totals("health")
    crit = rec.totals("critical") if "critical" in rec.lanes else None
    be_max = [r["be_max_in_flight"] for r in table if r["be_max_in_flight"] is not None]
    limits = [r["limit"] for r in table if r["limit"] is not None]
    return {
        "scenario": scenario.name, "front": front, "seconds": len(table),
        "target_rps": target / max(1, len(table)), "sent_rps": sent / max(1, len(table)),
        # answers after the end (the last requests' drain) are not in the table
        "goodput_pct": 100.0 * good / servable if servable else None,
        "goodput_rps": good / max(1, len(table)),
        "p50_ms": percentile(ok_ms, 50), "p99_ms": percentile(ok_ms, 99),
        "shed_pct": 100.0 * sum(b.rejected for b in app) / sent if sent else None,
        "reject_p50_ms": percentile(rej_ms, 50),
        "timeouts": sum(b.timeout for b in app), "errors": sum(b.error for b in app),
        "skipped": sum(b.skipped for b in app),
        "health_pct": 100.0 * health.ok / max(1, health.sent + health.skipped),
        "health_sent": health.sent + health.skipped,
        "critical_pct": (100.0 * crit.ok / max(1, crit.sent + crit.skipped)) if crit else None,
        "be_max_in_flight": max(be_max) if be_max else None,
        "limit_last": limits[-1] if limits else None,
        "convergence": convergence(table, scenario, seconds),
        "drift_pct": drift(table, scenario),
    }


# ---- table ------------------------------------------------------------------------------------

COLUMNS = [
    ("scenario", "scenario", "{}"), ("front", "front end", "{}"),
    ("sent_rps", "sent/s", "{:.0f}"), ("target_rps", "target/s", "{:.0f}"),
    ("skipped", "not sent", "{}"),
    ("goodput_pct", "goodput %", "{:.0f}"), ("p50_ms", "p50 ms", "{:.0f}"),
    ("p99_ms", "p99 ms", "{:.0f}"), ("shed_pct", "shed %", "{:.0f}"),
    ("reject_p50_ms", "rej p50 ms", "{:.1f}"), ("timeouts", "timeouts", "{}"),
    ("health_pct", "health %", "{:.1f}"), ("critical_pct", "crit ok %", "{:.1f}"),
    ("be_max_in_flight", "be max inflight", "{}"), ("limit_last", "limit", "{}"),
    ("convergence", "converge", "{}"), ("drift_pct", "drift %", "{:+.0f}"),
]


def table_text(summaries):
    head = [c[1] for c in COLUMNS]
    body = []
    for s in summaries:
        line = []
        for key, _, fmt in COLUMNS:
            v = s.get(key)
            line.append("-" if v is None else fmt.format(v))
        body.append(line)
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(head)]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for r in body:
        out.append("| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |")
    return "\n".join(out)


# ---- SVG --------------------------------------------------------------------------------------

W, PANEL_H, LEFT, RIGHT, TOP, GAP = 960, 170, 70, 170, 40, 46


def write_svg(path, table, title):
    n = max(1, len(table))
    panels = [
        ("concurrency, requests (log)", True, [
            ("backend slots", [r["slots"] for r in table], "#999", "6,4"),
            ("backend in flight (max/s)", [r["be_max_in_flight"] for r in table], "#d62728", None),
            ("limit", [r["limit"] for r in table], "#1f77b4", None),
            ("front end in flight", [r["fe_in_flight"] for r in table], "#17becf", "2,2"),
        ]),
        ("requests per second", False, [
            ("backend capacity", [r["capacity_rps"] for r in table], "#999", "6,4"),
            ("offered", [r["offered_rps"] for r in table], "#333", "2,3"),
            ("goodput (2xx)", [r["goodput_rps"] for r in table], "#2ca02c", None),
            *rejected_series(table),
            ("client timeouts", [r["timeout_rps"] for r in table], "#d62728", None),
            ("not sent (conn cap)", [r["skipped_rps"] for r in table], "#e377c2", "8,3"),
        ]),
        ("admitted latency, ms (log)", True, [
            ("p50", [r["p50_ms"] for r in table], "#2ca02c", None),
            ("p99", [r["p99_ms"] for r in table], "#9467bd", None),
            ("rejection p50", [r["reject_p50_ms"] for r in table], "#ff7f0e", "2,2"),
        ]),
        ("health checks per second", False, [
            ("passed", [r.get("health_ok") for r in table], "#2ca02c", None),
            ("failed", [(r.get("health_timeout") or 0) + (r.get("health_error") or 0)
                        + (r.get("health_rejected") or 0) for r in table], "#d62728", None),
        ]),
    ]
    h = TOP + len(panels) * (PANEL_H + GAP) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{h}" fill="white"/>',
           f'<text x="{LEFT}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>']
    for i, (name, log, series) in enumerate(panels):
        y0 = TOP + i * (PANEL_H + GAP) + 14
        out += panel(y0, name, log, series, n)
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def rejected_series(table):
    """Refusals per second: one line, or one per app lane when there are several."""
    lanes = [n for n in APP_LANES if table and f"{n}_rejected" in table[0]]
    if len(lanes) <= 1:
        return [("rejected (429/503)", [r["rejected_rps"] for r in table], "#ff7f0e", None)]
    dashes = {"normal": None, "critical": "6,2", "sheddable": "2,2"}
    return [(f"rejected, {n}", [r[f"{n}_rejected"] for r in table], "#ff7f0e", dashes[n])
            for n in lanes]


def panel(y0, name, log, series, n):
    pw = W - LEFT - RIGHT
    values = [v for _, vs, _, _ in series for v in vs if v is not None]
    if log:
        positive = [v for v in values if v > 0] or [1.0]
        lo = 10 ** max(-1, math.floor(math.log10(min(positive))))
        hi = 10 ** math.ceil(math.log10(max([10 * lo] + values)))
        ticks = [10 ** e for e in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]
    else:
        step = nice_step(max([1.0] + values) * 1.08 / 4)
        lo, hi = 0.0, step * math.ceil(max([1.0] + values) * 1.08 / step)
        ticks = [k * step for k in range(int(round(hi / step)) + 1)]

    def y(v):
        if log:
            v = max(lo, v)
            f = (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        else:
            f = (v - lo) / (hi - lo)
        return y0 + PANEL_H - f * PANEL_H

    def x(t):
        return LEFT + (t + 0.5) * pw / n

    out = [f'<text x="{LEFT}" y="{y0 - 4}" font-weight="bold">{escape(name)}</text>',
           f'<rect x="{LEFT}" y="{y0}" width="{pw}" height="{PANEL_H}" fill="none" stroke="#ccc"/>']
    for v in ticks:
        yy = y(v)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{yy:.1f}" y2="{yy:.1f}" '
                   f'stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end">{fmt_tick(v)}</text>')
    step = max(1, int(round(n / 12 / 5)) * 5) if n > 12 else 1
    for t in range(0, n + 1, step):
        xx = LEFT + t * pw / n
        out.append(f'<text x="{xx:.1f}" y="{y0 + PANEL_H + 13}" text-anchor="middle">{t}s</text>')
    for j, (label, vs, color, dash) in enumerate(series):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        for seg in segments(vs):
            pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in seg)
            if len(seg) == 1:
                t, v = seg[0]
                out.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2" fill="{color}"/>')
            else:
                out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" '
                           f'stroke-width="1.6"{d}/>')
        ly = y0 + 12 + j * 15
        lx = LEFT + pw + 10
        out.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" '
                   f'stroke-width="2"{d}/>')
        out.append(f'<text x="{lx + 23}" y="{ly}">{escape(label)}</text>')
    return out


def segments(vs):
    """Runs of consecutive known values: [[(t, v), ...], ...]."""
    out, cur = [], []
    for t, v in enumerate(vs):
        if v is None:
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append((t, v))
    if cur:
        out.append(cur)
    return out


def nice_step(v):
    """The smallest of 1, 2, 5 times a power of ten that is at least v."""
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 5, 10):
        if m * e >= v:
            return m * e
    return 10 * e


def fmt_tick(v):
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"

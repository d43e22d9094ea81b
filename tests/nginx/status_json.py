"""weir_status's formats (run by run.py: status-json): after known traffic, `?format=json`
answers the JSON status (application/json) with the counts that traffic must give, the same
numbers as the default Prometheus text under the same names; an unknown format is 400. Then
rejections from many client addresses (127.0.0.0/8 sources) through two nginx workers: the
JSON names the hot key and client first and its per-second history counts the rejections."""

import http.client
import json
import subprocess

from run import Nginx, check, request

POLICY = """[zones.pz]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[exempt.health]
match = [{ path = "/health" }]
[[limit]]
name = "per-ip"
class = "*"
zone = "pz"
"""

HTTP = """
    weir_req_zone $binary_remote_addr zone=rz:1m rate=1r/m;
%POLICY%
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        location = /metrics { weir_status; }
        location / { %WEIR% try_files /f =404; }
        location /d { weir_req zone=rz; try_files /f =404; }
    }
"""


def fetch(port, method, target):
    """(status, Content-Type, body text)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, target)
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read().decode()
    finally:
        c.close()


def page_headers(port):
    """?format=html: the status page (tests/browser runs it), with its policy and headers."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/metrics?format=html")
        r = c.getresponse()
        body = r.read().decode()
        h = {k.lower(): v for k, v in r.getheaders()}
    finally:
        c.close()
    check(r.status == 200 and h.get("content-type") == "text/html; charset=utf-8",
          f"?format=html: {r.status} {h}")
    csp = h.get("content-security-policy", "")
    check(csp.startswith("default-src 'none'; script-src 'sha256-")
          and "frame-ancestors 'none'" in csp, f"page policy: {csp!r}")
    check(h.get("x-frame-options") == "DENY" and h.get("cache-control") == "no-store",
          f"page headers: {h}")
    check(body.startswith("<!DOCTYPE html>") and "?format=json" in body, "page body")


def prometheus_samples(text):
    """{'family{labels}': value} of the sample lines."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            check(series not in out, f"{series} twice:\n{text}")
            out[series] = int(value)
    return out


def json_samples(status, text):
    """The JSON status's numbers under the Prometheus series docs/METRICS.md maps them to."""
    def family(prefix, key):
        total = f"{prefix}{key}_total"
        return total if f"# TYPE {total} counter" in text else prefix + key

    out = {}
    for k, v in (status["engine"] or {}).items():
        out[f"weir_{k}_total"] = v
    for lim in status["limits"]:
        for k, v in counts(lim).items():
            if k != "name":
                out[f'weir_limit_requests_total{{limit="{lim["name"]}",verdict="{k}"}}'] = v
    for group, prefix in (("zones", "weir_zone_"), ("clusters", "weir_cluster_")):
        for z in status[group]:
            for k, v in z.items():
                if k != "name":
                    out[f'{family(prefix, k)}{{zone="{z["name"]}"}}'] = v
    return out


def counts(lim):
    """A limit's entry without its live view (the objects: top keys, per-second history)."""
    return {k: v for k, v in lim.items() if not isinstance(v, dict)}


def limit(name, passed, rejected):
    """A limit's entry in the JSON status, for traffic that is never delayed or queued."""
    return {"name": name, "passed": passed, "delayed": 0, "rejected": rejected, "queued": 0,
            "dry_run_delayed": 0, "dry_run_rejected": 0, "banned": 0}


def status_json(ngx, promcheck):
    """The JSON status, checked against the Prometheus text served next to it."""
    st, ctype, body = fetch(ngx.port, "GET", "/metrics?format=json")
    check(st == 200 and ctype == "application/json", f"?format=json: {st} {ctype}")
    status = json.loads(body)
    st, ctype, text = fetch(ngx.port, "GET", "/metrics")
    check(st == 200 and ctype.startswith("text/plain; version=0.0.4"), f"default: {st} {ctype}")
    p = subprocess.run([promcheck], input=text, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"not valid Prometheus text: {p.stderr.strip()}\n{text}")
    check(json_samples(status, text) == prometheus_samples(text),
          f"JSON and Prometheus text differ:\n{body}\n{text}")
    return status


def test_status_json(module, promcheck):
    both = Nginx(module, HTTP.replace("%POLICY%", "    weir_policy %DIR%/policy.toml;")
                 .replace("%WEIR%", "weir on;"), files={"policy.toml": POLICY, "html/f": "x"})
    try:
        both.start()
        got = [request(both.port, "GET", t)[0] for t in ("/", "/", "/", "/health", "/health",
                                                         "/d", "/d")]
        check(got == [200, 429, 429, 200, 200, 200, 503], f"traffic: {got}")
        status = status_json(both, promcheck)
        check(status["version"] == 2, f"version: {status['version']}")
        check(status["engine"] == {"requests": 5, "exempt": 2, "unmatched": 0, "bad_target": 0},
              f"engine: {status['engine']}")
        # The policy's limit, then the directives' engine's (weir_req zone=rz is limit rz.0).
        check([counts(x) for x in status["limits"]] == [limit("per-ip", 1, 2), limit("rz.0", 1, 1)],
              f"limits: {status['limits']}")
        zones = {z["name"]: z for z in status["zones"]}
        check(list(zones) == ["pz", "rz"], f"zones: {list(zones)}")
        for name, passed, rejected in (("pz", 1, 2), ("rz", 1, 1)):
            z = zones[name]
            check((z["occupancy"], z["passed"], z["rejected"]) == (1, passed, rejected)
                  and z["capacity"] > 0, f"zone {name}: {z}")
        check(status["clusters"] == [], f"clusters: {status['clusters']}")

        check(fetch(both.port, "GET", "/metrics?format=prometheus")[0] == 200, "format=prometheus")
        for bad in ("xml", "JSON", "", "jsonx"):
            st = fetch(both.port, "GET", f"/metrics?format={bad}")[0]
            check(st == 400, f"?format={bad}: {st}")
        st, ctype, body = fetch(both.port, "HEAD", "/metrics?format=json")
        check((st, ctype, body) == (200, "application/json", ""), f"HEAD: {st} {ctype} {body!r}")
        page_headers(both.port)
        both.check_log()
    finally:
        both.cleanup()

    zones_only = Nginx(module, HTTP.replace("%POLICY%", "").replace("%WEIR%", ""),
                       files={"html/f": "x"})
    try:
        zones_only.start()
        check(request(zones_only.port, "GET", "/d")[0] == 200, "directive zone")
        status = status_json(zones_only, promcheck)
        # Directives alone: their engine's totals (host-selected limits count no requests).
        check(status["engine"] == {"requests": 0, "exempt": 0, "unmatched": 0, "bad_target": 0}
              and [counts(x) for x in status["limits"]] == [limit("rz.0", 1, 0)],
              f"no policy: {status}")
        check([(z["name"], z["passed"]) for z in status["zones"]] == [("rz", 1)],
              f"no policy: {status['zones']}")
        zones_only.check_log()
    finally:
        zones_only.cleanup()
    top_keys(module)
    return ("?format=json: the counts of known traffic, the same numbers as the Prometheus "
            "text under the same names, with a policy and without; unknown formats 400; "
            "?format=html the page with its policy and headers; "
            "the top rejected key and client of 30 crawler addresses and one hot one")


TOP_POLICY = POLICY.replace('name = "per-ip"', 'name = "per-ip"\nkey = ["ip", "path"]')

TOP_HTTP = """
%POLICY%
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        location = /metrics { weir_status; }
        location / { weir on; try_files /f =404; }
    }
"""


def from_addr(port, source, target):
    """GET target from source address `source` (a 127.0.0.0/8 address); the status code."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        c.request("GET", target)
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def top_keys(module):
    """30 addresses twice each (one 429 each) and 127.0.0.99 twenty times (19 429s), through
    two workers: the hot key and client lead both windows, every rejection is in the
    per-second history, and the Prometheus text names no key."""
    ngx = Nginx(module, TOP_HTTP.replace("%POLICY%", "    weir_policy %DIR%/policy.toml;"),
                files={"policy.toml": TOP_POLICY, "html/f": "x"}, workers=2)
    try:
        ngx.start()
        got = []
        for i in range(30):
            got += [from_addr(ngx.port, f"127.0.0.{10 + i}", f"/crawl/{i}") for _ in range(2)]
        got += [from_addr(ngx.port, "127.0.0.99", "/hot") for _ in range(20)]
        check(got.count(429) == 30 + 19, f"traffic: {got}")
        st, _, body = fetch(ngx.port, "GET", "/metrics?format=json")
        check(st == 200, f"status {st}")
        lim = json.loads(body)["limits"][0]
        check((lim["passed"], lim["rejected"]) == (31, 49), f"counts: {counts(lim)}")
        for w in ("last_1m", "last_15m"):
            win = lim[w]
            # Space-Saving over 16 entries over-counts by at most 49 / 16 rejections.
            key, client = win["keys"][0], win["clients"][0]
            check(key["key"] == "ip=127.0.0.99 path=/hot" and 19 <= key["rejected"] <= 22
                  and client["client"] == "127.0.0.99" and 19 <= client["rejected"] <= 22
                  and win["rejected"] == 49 and len(win["clients"]) == 10, f"{w}: {win}")
        per = lim["per_second"]
        check(len(per["rejected"]) == 900 and sum(per["rejected"]) == 49
              and sum(per["rejected"][-120:]) == 49, f"per second: {per['rejected'][-120:]}")
        st, _, text = fetch(ngx.port, "GET", "/metrics")
        check("127.0.0.99" not in text and "/hot" not in text, f"Prometheus names a key:\n{text}")
        ngx.check_log()
    finally:
        ngx.cleanup()

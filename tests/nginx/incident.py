"""The crawler incident and docs/INCIDENT.md's runbook through a real nginx (run by run.py:
incident). A crawler on 300 forwarded addresses in six /24 networks, one or two requests each,
walks tool pages in three URL shapes among readers and a health check. With only a per-address
limit every crawler request passes; `weir replay` of that access log with the tightened policy
(a per-/24 limit with a ban on a class over every shape) says it would have stopped the crawler
and no one else; `weir check`, `nginx -t` and a reload put that policy in. The next wave is
stopped: its networks are the limit's top keys and banned (in the JSON status, in
`weir top --once --json`, one `banning key` line each), every 429 names the limit and key in
the access log, readers and health checks pass. Then the status endpoint's key operations, on
a listener of its own as in the runbook: a banned client of the site, through the proxy on
127.0.0.1, cannot lift its ban; from 127.0.0.1 an unban and a reset let the network in again;
from 127.0.0.2 they are refused (403) and change nothing."""

import collections
import http.client
import json
import os
import re
import subprocess
import urllib.parse

from run import Nginx, check, free_port

NETS = ["36.110.1", "36.110.7", "36.111.20", "36.111.42", "101.89.3", "101.89.9"]
SHAPES = [
    "/w/Special:WhatLinksHere/Page_{}",
    "/index.php?title=Special%3AWhatLinksHere%2FPage_{}",
    "/w/index.php?title=Special:RecentChangesLinked&target=Page_{}",
]
LIMIT = "tools-per-net"

# What the site ran when the crawler came: a per-address limit, which it never trips.
BEFORE = """trusted_proxies = ["127.0.0.1/32"]
client_ip_header = "x-forwarded-for"

[zones.per_ip]
size = "1m"
algorithm = "gcra"
rate = "5r/s"

[exempt.health]
match = [{ path = ["/healthz"] }]

[[limit]]
name = "per-ip"
class = "*"
zone = "per_ip"
burst = 20
nodelay = true
"""

# docs/INCIDENT.md's tightened policy: one class over every URL shape of the tool pages, a
# per-/24 limit on it whose networks are banned after five rejections, and a site-wide
# ceiling on the class.
AFTER = BEFORE + """
[zones.tools_per_net]
size = "1m"
algorithm = "gcra"
rate = "10r/m"

[zones.tools]
size = "64k"
algorithm = "gcra"
rate = "60r/m"

[classes.tools]
match = [
  { path_iglob = ["*special*:*whatlinkshere*", "*special*:*recentchangeslinked*"] },
  { query.title = { iglob = "*special*:*whatlinkshere*" } },
  { query.title = { iglob = "*special*:*recentchangeslinked*" } },
]

[[limit]]
name = "tools-per-net"
class = "tools"
zone = "tools_per_net"
ipv4_prefix = 24
ipv6_prefix = 56
burst = 5
nodelay = true
log_level = "warn"
ban = { after = 5, within = "1m", duration = "10m" }

[[limit]]
name = "tools-global"
class = "tools"
zone = "tools"
key = "global"
burst = 100
nodelay = true
status = 503
"""

LOG_FORMAT = ('$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
              '"$http_x_forwarded_for" $weir_action $weir_limit "$weir_key"')

# The site behind its proxy on 127.0.0.1 (the policy's trusted_proxies), and the status on a
# listener of its own (%STATUS%) that the proxy does not forward to, as docs/INCIDENT.md has it.
HTTP = """
    log_format weir '%FORMAT%';
    weir_policy %DIR%/policy.toml;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        access_log %DIR%/logs/access.log weir;
        weir on;
        location / { try_files /page.html =404; }
    }
    server {
        listen 127.0.0.1:%STATUS%;
        location = /weir_status {
            allow 127.0.0.1;
            allow 10.0.0.0/8;
            deny all;
            limit_except GET { allow 127.0.0.1; deny all; }
            weir_status write=on;
        }
    }
""".replace("%FORMAT%", LOG_FORMAT)


def wave(seed):
    """(kind, forwarded address or None, target): 300 crawler addresses, 50 in each /24, one
    or two tool pages each in the three shapes, with a page of one of three readers every 12th
    request and a health check every 15th."""
    out, i = [], 0
    for a in range(300):
        ip = f"{NETS[a % len(NETS)]}.{1 + a // len(NETS)}"
        for k in range(1 + a % 2):
            n = seed * 1000 + a * 2 + k
            out.append(("crawler", ip, SHAPES[(a + k) % len(SHAPES)].format(n)))
            i += 1
            if i % 12 == 0:
                out.append(("reader", f"203.0.113.{10 * seed + i // 12 % 3}", f"/w/Article_{n}"))
            if i % 15 == 0:
                out.append(("health", None, "/healthz"))
    return out


def http_req(port, method, target, xff=None, source="127.0.0.1", headers=None):
    """(status, body text) of one request from `source` (a 127.0.0.0/8 address)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        h = dict(headers or {})
        if xff:
            h["X-Forwarded-For"] = xff
        c.request(method, target, headers=h)
        r = c.getresponse()
        return r.status, r.read().decode("latin-1")
    finally:
        c.close()


def play(port, plan):
    """{kind: [status, ...]} of the plan's requests, in order."""
    got = {}
    for kind, ip, target in plan:
        got.setdefault(kind, []).append(http_req(port, "GET", target, ip)[0])
    return got


def tally(got):
    """{kind: {status: count}}, for messages."""
    return {k: dict(collections.Counter(v)) for k, v in got.items()}


def weir(binary, *args):
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def status(port):
    st, body = http_req(port, "GET", "/weir_status?format=json")
    check(st == 200, f"status: {st}")
    return {lim["name"]: lim for lim in json.loads(body)["limits"]}


def access_log(ngx):
    """[(status, action, limit, key, target)] of the access log's lines."""
    out = []
    with open(ngx.path("logs", "access.log")) as f:
        for line in f:
            m = re.search(r'"\w+ (\S+) HTTP/1\.1" (\d+) \d+ "[^"]*" (\S+) (\S+) "([^"]*)"$',
                          line.rstrip("\n"))
            check(m, f"access log line: {line}")
            out.append((int(m.group(2)), m.group(3), m.group(4), m.group(5), m.group(1)))
    return out


def replay(ngx, binary):
    """`weir replay` of the first wave's log with the tightened policy: the crawler's tool
    pages are rejected by tools-per-net, nothing of the readers' or health checks'."""
    policy = ngx.path("after.toml")
    code, out, err = weir(binary, "check", policy)
    check(code == 0 and out.strip() == f"{policy}: ok (0 warnings)", f"weir check: {out}{err}")
    verdicts = ngx.path("verdicts.jsonl")
    code, out, err = weir(binary, "replay", "--json", "--no-progress", "--policy", policy,
                          "--format", LOG_FORMAT, "--verdicts", verdicts,
                          ngx.path("logs", "access.log"))
    check(code == 0, f"weir replay: {code} {err}")
    report = {lim["name"]: lim for lim in json.loads(out)["limits"]}
    per_net = report[LIMIT]
    # Each network: burst 5 + 1 passes, five rejections, then banned for the rest of the log.
    check(per_net["rejected"] == 5 * len(NETS) and per_net["banned"] >= 350
          and report["per-ip"]["rejected"] == 0
          and {k["key"] for k in per_net["top_keys"]} == {f"{n}.0/24" for n in NETS},
          f"replay: {json.dumps(report)}")
    with open(verdicts) as f:
        lines = [json.loads(l) for l in f]
    innocent = [v for v in lines if not v["client"].startswith(tuple(NETS))
                and v["verdict"] not in ("pass", "exempt")]
    check(not innocent and sum(v["verdict"] == "exempt" for v in lines) == 30,
          f"replay limited readers or health checks: {innocent[:3]}")
    return per_net["rejected"] + per_net["banned"]


def key_op(port, method, key, action=None, source="127.0.0.1", xff=None):
    q = {"limit": LIMIT, "key": key}
    headers = {}
    if action:
        q["action"] = action
        headers["Weir-Key-Action"] = action
    st, body = http_req(port, method, "/weir_status?" + urllib.parse.urlencode(q),
                        source=source, xff=xff, headers=headers)
    return st, body


def key_ops(ngx):
    """Reset and unban through the guarded status endpoint: (what was checked, 200), or
    (None, the POST's status) when weir_status has no key operations (405 or 400)."""
    net = f"{NETS[0]}.0/24"
    probe = lambda: http_req(ngx.port, "GET", SHAPES[0].format(99999), f"{NETS[0]}.250")[0]
    # A client of the site, through the proxy (127.0.0.1 with its X-Forwarded-For), lifting
    # its own ban: the site's port has no status, and the ban stays.
    st, body = key_op(ngx.port, "POST", net, "unban", xff=f"{NETS[0]}.250")
    check(not body.startswith("{"), f"the site's port answered a key operation: {st} {body}")
    check(net in {b["key"] for b in status(ngx.status_port)[LIMIT]["bans"]},
          "a client through the proxy lifted its ban")
    st, body = key_op(ngx.status_port, "POST", net, "unban", source="127.0.0.2")
    check(st == 403, f"POST from 127.0.0.2: {st} {body}")
    st, body = key_op(ngx.status_port, "POST", net, "unban")
    if st in (405, 400):
        return None, st
    check(st == 200, f"POST unban: {st} {body}")
    got = json.loads(body)
    check((got["limit"], got["key"], got["action"], got["changed"], got["banned"],
           got["ban_left_s"]) == (LIMIT, net, "unban", True, False, 0), f"unban answer: {got}")
    bans = {b["key"] for b in status(ngx.status_port)[LIMIT]["bans"]}
    check(net not in bans and len(bans) == len(NETS) - 1, f"bans after unban: {bans}")
    log = ngx.error_log()
    check(log.count(f'lifting ban of key "{net}" of weir limit "{LIMIT}"') == 1,
          f"one unban line:\n{log[-2000:]}")
    # The rate state is still spent (one token back at most: 10r/m refills one each 6 s,
    # and a loaded machine may take that long since the wave): not banned any more.
    st, body = key_op(ngx.status_port, "GET", net)
    got = json.loads(body)
    check(st == 200 and got["banned"] is False and got["remaining"] <= 1, f"GET: {st} {body}")

    check(key_op(ngx.status_port, "GET", net, "reset")[0] == 405, "GET ...&action=reset")
    # From a denied address a reset changes nothing.
    st, body = key_op(ngx.status_port, "POST", net, "reset", source="127.0.0.2")
    check(st == 403, f"POST reset from 127.0.0.2: {st} {body}")
    # (a reset would give the whole burst back, 6)
    check(json.loads(key_op(ngx.status_port, "GET", net)[1])["remaining"] <= 1,
          "reset from 127.0.0.2")
    st, body = key_op(ngx.status_port, "POST", net, "reset")
    got = json.loads(body)
    check(st == 200 and got["remaining"] > 0 and got["retry_after_s"] == 0,
          f"POST reset: {st} {body}")
    check(ngx.error_log().count(f'resetting key "{net}" of weir limit "{LIMIT}"') == 1,
          "one reset line")
    check(probe() == 200, "the network after unban and reset")

    # Another network stays banned; an unban from 127.0.0.2 leaves it so.
    other = f"{NETS[1]}.0/24"
    check(key_op(ngx.status_port, "POST", other, "unban", source="127.0.0.2")[0] == 403, "403")
    check(key_op(ngx.status_port, "GET", other, source="127.0.0.2")[0] == 403, "GET from 127.0.0.2")
    got = json.loads(key_op(ngx.status_port, "GET", other)[1])
    check(got["banned"] is True and 0 < got["ban_left_s"] <= 600, f"{other}: {got}")
    st = http_req(ngx.port, "GET", SHAPES[1].format(99998), f"{NETS[1]}.250")[0]
    check(st == 429, f"{other} after a refused unban: {st}")
    return f"unban + reset of {net} from 127.0.0.1 let it in, 403 from 127.0.0.2", 200


def test_incident(module, binary, env=None):
    check(os.access(binary, os.X_OK),
          f"{binary}: no weir binary (cargo build --release -p weir-cli)")
    status_port = free_port()
    ngx = Nginx(module, HTTP.replace("%STATUS%", str(status_port)), workers=2, env=env,
                files={"policy.toml": BEFORE, "after.toml": AFTER,
                       "html/page.html": "a wiki page\n"})
    ngx.status_port = status_port
    try:
        ngx.start()
        # The incident: nothing limits the crawler.
        first = wave(1)
        got = play(ngx.port, first)
        check(all(set(v) == {200} for v in got.values()), f"before: {tally(got)}")
        would = replay(ngx, binary)

        # Tighten: check, test, reload (the per-ip zone keeps its state).
        os.replace(ngx.path("after.toml"), ngx.path("policy.toml"))
        code, out = ngx.test_config()
        check(code == 0 and "test is successful" in out, f"nginx -t: {out}")
        ngx.reload()
        got = play(ngx.port, wave(2))
        crawler = got["crawler"]
        passed = crawler.count(200)
        check(set(got["reader"]) == {200} and set(got["health"]) == {200}, f"after: {tally(got)}")
        # Each /24: burst 5 + 1 pass (one more if the 6 s refill falls inside the wave).
        check(set(crawler) == {200, 429} and 6 * len(NETS) <= passed <= 8 * len(NETS),
              f"crawler after the reload: {passed} of {len(crawler)} passed")

        nets = {f"{n}.0/24" for n in NETS}
        lims = status(ngx.status_port)
        lim = lims[LIMIT]
        # Five rejections per network, then the ban refuses the rest.
        check(lim["rejected"] == 5 * len(NETS) and lim["banned"] == len(crawler) - passed
              - lim["rejected"] and lims["per-ip"]["rejected"] == 0
              and lims["tools-global"]["rejected"] == 0, f"counts: {lim}")
        check({k["key"] for k in lim["last_1m"]["keys"]} == nets
              and all(c["client"].startswith(tuple(NETS)) for c in lim["last_1m"]["clients"]),
              f"top keys: {lim['last_1m']}")
        check({b["key"] for b in lim["bans"]} == nets
              and all(0 < b["remaining_s"] <= 600 for b in lim["bans"]), f"bans: {lim['bans']}")
        log = ngx.error_log()
        for net in nets:
            line = f'banning key "{net}" for 600s by weir limit "{LIMIT}"'
            check(log.count(line) == 1, f"one ban line for {net}:\n{log[-3000:]}")

        url = f"http://127.0.0.1:{ngx.status_port}/weir_status"
        code, out, err = weir(binary, "top", "--once", "--json", "--limit", LIMIT, url)
        check(code == 0, f"weir top: {code} {err}")
        top = json.loads(out)["limits"][0]
        check(top["name"] == LIMIT and {k["key"] for k in top["last_1m"]["keys"]} == nets
              and {b["key"] for b in top["bans"]} == nets, f"weir top --once --json: {out}")

        lines = access_log(ngx)
        limited = [x for x in lines if x[0] == 429]
        check(len(limited) == len(crawler) - passed
              and all(x[1:3] == ("reject", LIMIT) and x[3] in nets for x in limited),
              f"429 lines: {limited[:5]}")
        health = [x for x in lines if x[4] == "/healthz"]
        check(len(health) == 60 and all(x[:4] == (200, "exempt", "-", "-") for x in health),
              f"health lines: {health[:5]}")

        ops, st = key_ops(ngx)
        if ops is None:
            ops = (f"SKIPPED key operations: POST /weir_status?limit=&key=&action= answered "
                   f"{st}, not served")
            print(f"SKIP incident: {ops}", flush=True)
        ngx.check_log()
    finally:
        ngx.cleanup()
    return (f"before: {len(first)} requests pass, replay says {LIMIT} would refuse {would}; "
            f"after check/-t/reload: {passed} of {len(crawler)} crawler requests pass, "
            f"{len(nets)} /24s top keys and banned (status, weir top, error log), every 429 "
            f"logged with limit and key, readers and health checks untouched; {ops}")

"""`weir top --once` against a real nginx (run by run.py: weir-top): examples/wiki.toml in
policy mode, a crawler spread over 300 addresses (one or two requests each, as
X-Forwarded-For from the trusted loopback proxy) walking tool pages in two URL shapes, then
one snapshot as JSON and as text. The snapshot names the tool class's shared limit, its
anonymous bucket as the top key, crawler addresses as the top clients, and the limit's
rejections as a nonzero rate that matches the 503s the crawler got."""

import json
import os
import subprocess

from run import Nginx, check, request

HTTP = """
    weir_policy %POLICY%;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        weir on;
        location / { try_files $uri /page.html; }
        location = /weir { weir off; weir_status; }
    }
"""


def crawler():
    """(address, target) of the crawler: 300 addresses, each in its own /24 (tools-per-net
    never fires), one or two tool pages each, alternating the article-path and script shapes."""
    out = []
    for i in range(300):
        ip = f"36.{110 + i // 250}.{i % 250}.{1 + i % 7}"
        for k in range(1 + i % 2):
            page = i * 2 + k
            out.append((ip, f"/w/Special:WhatLinksHere/Page_{page}" if (i + k) % 2 else
                        f"/index.php?title=Special%3AWhatLinksHere%2FPage_{page}"))
    return out


def weir_top(weir, *args):
    p = subprocess.run([weir, "top", *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def test_weir_top(module, weir):
    check(os.access(weir, os.X_OK), f"{weir}: no weir binary (cargo build --release -p weir-cli)")
    policy = os.path.abspath("examples/wiki.toml")
    ngx = Nginx(module, HTTP.replace("%POLICY%", policy), workers=2,
                files={"html/page.html": "a wiki page\n"})
    try:
        ngx.start()
        plan = crawler()
        got = [request(ngx.port, "GET", target, [("X-Forwarded-For", ip)])[0]
               for ip, target in plan]
        limited = got.count(503)
        # tools-global (60r/m, burst 30, one bucket for every anonymous client) passes about 31
        # and rejects the rest with its 503; nothing else limits this traffic.
        check(set(got) == {200, 503} and 400 <= limited <= 430, f"traffic: {limited} 503s")
        addresses = {ip for ip, _ in plan}
        url = f"http://127.0.0.1:{ngx.port}/weir"

        code, out, err = weir_top(weir, "--once", "--json", url)
        check(code == 0 and err == "", f"weir top --once --json: {code} {err}")
        snap = json.loads(out)
        check(snap["weir_top"] == 1 and snap["url"] == url + "?format=json", f"snapshot: {out}")
        names = [l["name"] for l in snap["limits"]]
        check(names == ["per-ip", "tools-per-net", "tools-global", "tools-all"], f"limits {names}")
        lim = snap["limits"][2]
        check(lim["total"]["rejected"] == limited, f"total: {lim['total']} vs {limited} 503s")
        for w in ("last_1m", "last_15m"):
            win = lim[w]
            # Every rejection is in the per-second history: the rate is the count over the window.
            check(win["rejected_per_s"] > 0
                  and round(win["rejected_per_s"] * win["seconds"]) == limited, f"{w}: {win}")
            # One bucket for every client without a session cookie: the only key.
            check([k["key"] for k in win["keys"]] == ["cookie:wiki_session=(absent)"]
                  and win["keys"][0]["rejected"] == limited, f"{w} keys: {win['keys']}")
            clients = [c["client"] for c in win["clients"]]
            check(len(clients) == 10 and set(clients) <= addresses
                  and all(1 <= c["rejected"] <= 2 + limited // 16 for c in win["clients"]),
                  f"{w} clients: {win['clients']}")
        others = {l["name"]: l["total"]["rejected"] for l in snap["limits"] if l is not lim}
        check(others == {"per-ip": 0, "tools-per-net": 0, "tools-all": 0}, f"others: {others}")
        check(lim["bans"] is None, f"bans without bans in the status: {lim['bans']}")

        code, out, err = weir_top(weir, "--once", "--limit", "tools-global", "--top", "3",
                                  f"127.0.0.1:{ngx.port}/weir")
        lines = out.splitlines()
        check(code == 0 and lines[0].startswith(f"limit tools-global: total ")
              and lines[0].endswith(f", {limited} rejected")
              and f"{limited:>8}  cookie:wiki_session=(absent)" in out
              and "tools-all" not in out, f"weir top --once:\n{out}{err}")
        code, out, err = weir_top(weir, "--once", "--json", "--limit", "nope", url)
        check(code == 2 and "no limit \"nope\"" in err and out == "", f"--limit nope: {err}")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return (f"weir top --once (--json) names tools-global, its anonymous bucket and crawler "
            f"addresses, {limited} rejections from 300 forwarded addresses as "
            f"{limited / 60:.2f}/s over the last minute")

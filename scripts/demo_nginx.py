#!/usr/bin/env python3
"""The main job: the crawler incident, live, through nginx with the weir module.

Starts Debian's nginx on 127.0.0.1 (a high port, everything under a temp dir) with the module
and examples/wiki.toml in policy mode, plays one burst of incident traffic at it — a crawler
spread over 1,500 addresses (one or two requests each, both URL shapes of the tool pages),
readers, versioned static assets, logged-in editors (tool pages and drafts, on budgets keyed
on their session cookie) and health checks, every client address sent as X-Forwarded-For
from the trusted loopback proxy — prints what passed and what was limited per traffic group
and per limit (from the module's own weir_status metrics), and stops nginx by its pid.

    python3 scripts/demo_nginx.py [target/nginx/ngx_http_weir_module.so] [examples/wiki.toml]
"""
import os
import random
import re
import sys
import threading
from collections import Counter, defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "nginx"))
from run import Nginx, get_body, read_response, send  # noqa: E402

CHROME_ZH = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
             "(KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36")


def traffic(rng):
    """(group, target, headers) for one burst of incident traffic."""
    out = []
    for i in range(1500):
        ip = f"36.{110 + i // 250}.{i % 250}.{1 + i % 7}"
        for _ in range(rng.choice((1, 2))):
            page = rng.randrange(100000)
            target = rng.choice((f"/w/Special:WhatLinksHere/Page_{page}",
                                 f"/index.php?title=Special%3AWhatLinksHere%2FPage_{page}"))
            out.append(("crawler (1500 IPs)", target,
                        [("X-Forwarded-For", ip), ("User-Agent", CHROME_ZH),
                         ("Accept-Language", "zh-CN,zh;q=0.9")]))
    for i in range(100):
        ip = f"198.51.100.{1 + i}"
        out.append(("readers: pages", f"/wiki/Article_{rng.randrange(5000)}",
                    [("X-Forwarded-For", ip)]))
        for asset in ("/app.css?v=3", "/load.js?v=7"):
            out.append(("readers: static assets", asset, [("X-Forwarded-For", ip)]))
    for i in range(10):
        for k in range(10):
            page = f"Special:WhatLinksHere/Draft_{k}" if k % 2 else f"Draft_{k}"
            out.append(("logged-in editors", f"/w/{page}",
                        [("X-Forwarded-For", f"203.0.113.{10 + i}"),
                         ("Cookie", f"wiki_session=editor{i}; lang=en")]))
    for _ in range(60):
        out.append(("health checks", "/healthz", [("X-Forwarded-For", "10.0.0.2")]))
    rng.shuffle(out)
    return out


def main():
    module = os.path.abspath(sys.argv[1] if len(sys.argv) > 1
                             else "target/nginx/ngx_http_weir_module.so")
    policy = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else "examples/wiki.toml")
    http = f"""
    weir_policy {policy};
    server {{
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        weir on;
        location / {{ try_files $uri /page.html; }}
        location = /metrics {{ weir off; weir_status; }}
    }}
"""
    files = {"html/page.html": "a wiki page\n", "html/app.css": "body{}\n",
             "html/load.js": "//\n", "html/healthz": "ok\n"}
    ngx = Nginx(module, http, workers=2, files=files)
    results = defaultdict(Counter)
    try:
        ngx.start()
        print(f"nginx {ngx.pid} on 127.0.0.1:{ngx.port} with {os.path.relpath(policy)}")
        work = traffic(random.Random(7))
        lock = threading.Lock()

        def worker(chunk):
            for group, target, headers in chunk:
                status, _ = read_response(send(ngx.port, "GET", target, headers))
                with lock:
                    results[group][status] += 1

        threads = [threading.Thread(target=worker, args=(work[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        print(f"\n{'traffic':<26}{'requests':>9}{'passed':>9}{'limited':>9}  statuses")
        for group in sorted(results):
            c = results[group]
            passed = c[200]
            print(f"{group:<26}{sum(c.values()):>9}{passed:>9}{sum(c.values()) - passed:>9}  "
                  + ", ".join(f"{s}×{n}" for s, n in sorted(c.items())))

        _, metrics = get_body(ngx.port, "/metrics")
        per_limit = defaultdict(dict)
        for name, verdict, n in re.findall(
                r'weir_limit_requests_total\{limit="([^"]+)",verdict="([a-z_]+)"\} (\d+)', metrics):
            per_limit[name][verdict] = int(n)
        print(f"\n{'limit (weir_status)':<26}{'passed':>9}{'rejected':>9}")
        for name, v in per_limit.items():
            print(f"{name:<26}{v.get('passed', 0):>9}{v.get('rejected', 0):>9}")
        exempt = re.search(r"^weir_exempt_total (\d+)", metrics, re.M)
        print(f"\nexempt (static assets): "
              f"{exempt.group(1) if exempt else '?'}")
        ngx.check_log()
    finally:
        ngx.cleanup()
        print("nginx stopped")


if __name__ == "__main__":
    main()

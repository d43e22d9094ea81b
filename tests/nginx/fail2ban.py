"""fail2ban against real rejection lines (run by run.py: fail2ban): nginx with a policy and
weir_req directives rejects requests from several loopback addresses over real HTTP; then
fail2ban-regex reads the error log with Debian's stock nginx-limit-req filter (which knows
nginx's limit_req line, so weir_req's rejections only) and with contrib/fail2ban's nginx-weir
filter (policy mode and weir_req). Each must find exactly the rejected requests, under their
clients' addresses, and never a dry-run or delay line."""

import collections
import os
import re
import socket
import subprocess

from run import Nginx, check, read_response

STOCK = "/etc/fail2ban/filter.d/nginx-limit-req.conf"
OURS = os.path.join(os.path.dirname(__file__), "..", "..", "contrib", "fail2ban", "filter.d",
                    "nginx-weir.conf")

POLICY = """[zones.pz]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[zones.bz]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[zones.dz]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[classes.p]
match = [{ path_prefix = "/p" }]
[classes.b]
match = [{ path_prefix = "/b" }]
[classes.slow]
match = [{ path_prefix = "/slow" }]
[[limit]]
name = "per-ip"
class = "p"
zone = "pz"
[[limit]]
name = "login"
class = "b"
zone = "bz"
ban = { after = 1, within = "1m", duration = "10m" }
[[limit]]
name = "watch"
class = "slow"
zone = "dz"
dry_run = true
"""

HTTP = """
    weir_req_zone $binary_remote_addr zone=rz:1m rate=1r/m;
    weir_req_zone $binary_remote_addr zone=dry:1m rate=1r/m;
    weir_policy %DIR%/policy.toml;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        location /p { weir on; try_files /f =404; }
        location /b { weir on; try_files /f =404; }
        location /slow { weir on; try_files /f =404; }
        location /d { weir_req zone=rz; try_files /f =404; }
        location /dry { weir_req zone=dry; weir_req_dry_run on; try_files /f =404; }
    }
"""


def get_from(source, port, target):
    """GET target over a connection from the loopback address `source`; the status."""
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    return read_response(s)[0]


def banned(log, filt):
    """{client: matches} that fail2ban-regex finds in `log` with filter file `filt`."""
    p = subprocess.run(["fail2ban-regex", "-o", "ip", log, filt], capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 0, f"fail2ban-regex {filt}: {p.returncode} {p.stderr.strip()}")
    return dict(collections.Counter(p.stdout.split()))


def test_fail2ban(module):
    check(os.path.exists(STOCK), f"{STOCK} missing: install fail2ban (make setup)")
    ngx = Nginx(module, HTTP, files={"policy.toml": POLICY, "html/f": "x"})
    try:
        ngx.start()
        # (client, target, requests, statuses): 1r/m and no burst, so the first passes.
        plan = [("127.0.0.2", "/p", [200, 429, 429]), ("127.0.0.3", "/p", [200, 429]),
                ("127.0.0.4", "/d", [200, 503, 503]), ("127.0.0.5", "/dry", [200, 200, 200]),
                ("127.0.0.6", "/slow", [200, 200]),
                ("127.0.0.7", "/b", [200, 429, 429, 429])]
        for client, target, want in plan:
            got = [get_from(client, ngx.port, target) for _ in want]
            check(got == want, f"{client} {target}: {got}, expected {want}")
        ngx.stop()
        log = ngx.path("logs", "error.log")
        text = ngx.error_log()
        # The lines the filters must leave alone are in the log.
        for line in (r'banning key "127\.0\.0\.7" for 600s by weir limit "login", client: 127\.0\.0\.7,',
                     r'limiting requests, banned key, by weir limit "login", client: 127\.0\.0\.7,',
                     r'limiting requests, dry run, excess: [0-9.]+ by zone "dry", client: 127\.0\.0\.5,',
                     r'limiting requests, dry run, by weir limit "watch", client: 127\.0\.0\.6,'):
            check(re.search(line, text), f"no {line!r} in the error log:\n{text[-3000:]}")

        stock = banned(log, STOCK)
        check(stock == {"127.0.0.4": 2}, f"stock nginx-limit-req filter: {stock}")
        ours = banned(log, OURS)
        check(ours == {"127.0.0.2": 2, "127.0.0.3": 1, "127.0.0.4": 2, "127.0.0.7": 3},
              f"contrib nginx-weir filter: {ours}")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return ("fail2ban-regex on real rejections: the stock nginx-limit-req filter finds weir_req's "
            "2, nginx-weir also policy mode's 6 (2 of a banned key), each under its client, once per "
            "request; no dry-run or banning line")

"""$weir_limit, $weir_action and $weir_key in an access log (run by run.py: access-log): every
limited request's line names the deciding limit and its key as the engine renders it, passes
and exempt requests name none, in policy mode (a limit, an exemption, a dry-run limit) and
with the weir_req / weir_conn directives (the zone's name)."""

import os

from run import Nginx, check, request

POLICY = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common",
                           "access_log_policy.toml")).read()

HTTP = """
    log_format weir '$status|$weir_action|$weir_limit|$weir_key|$request_uri';
    weir_policy %DIR%/policy.toml;
    weir_req_zone $remote_addr zone=rz:1m rate=1r/m;
    weir_conn_zone $remote_addr zone=cz:1m;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        access_log %DIR%/logs/access.log weir;
        location / { weir on; try_files /f =404; }
        location /z/ { weir_req zone=rz; weir_conn cz 10; try_files /f =404; }
    }
"""

# (target, status, action, limit, key) in order; nginx logs "-" for an empty variable
EXPECTED = [
    ("/p/1", 200, "pass", "-", "-"),
    ("/p/2", 429, "reject", "per-net", "127.0.0.0/24"),
    ("/p/3?x=1", 429, "reject", "per-net", "127.0.0.0/24"),
    ("/health", 200, "exempt", "-", "-"),
    ("/dry/a", 200, "pass", "-", "-"),
    ("/dry/a", 200, "dry-run-reject", "trial", "ip=127.0.0.1 path=/dry/a"),
    ("/other", 200, "pass", "-", "-"),
    ("/z/", 200, "pass", "-", "-"),
    ("/z/", 503, "reject", "rz", "127.0.0.1"),
]


def test_access_log(module):
    ngx = Nginx(module, HTTP, files={"policy.toml": POLICY, "html/f": "x"})
    try:
        ngx.start()
        for target, status, *_ in EXPECTED:
            got = request(ngx.port, "GET", target)[0]
            check(got == status, f"{target}: {got}, expected {status}")
        with open(ngx.path("logs", "access.log")) as f:
            lines = [line.rstrip("\n").split("|") for line in f]
        want = [[str(s), a, lim, key, t] for t, s, a, lim, key in EXPECTED]
        check(lines == want, "access log:\n" + "\n".join("|".join(x) for x in lines))
        for st, action, lim, key, _ in lines:
            limited = st in ("429", "503") or action.startswith("dry-run")
            check(limited == (lim != "-") and limited == (key != "-"),
                  f"limit/key only on limited lines: {st} {action} {lim} {key}")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return (f"{len(EXPECTED)} lines: rejections name limit and key (policy, weir_req), a "
            "dry-run limit's would-be rejection, passes and exemptions none")

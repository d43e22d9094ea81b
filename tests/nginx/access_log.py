"""$weir_limit, $weir_action and $weir_key in an access log (run by run.py: access-log): every
limited request's line names the deciding limit and its key as the engine renders it, passes
and exempt requests name none, in policy mode (a limit, an exemption, a dry-run limit) and
with the weir_req / weir_conn directives (the zone's name). access-log-redirects: the key
stays the charged one through error_page and try_files."""

import os
import time

import run
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


POLICY_REDIRECTS = """[zones.paths]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[classes.q]
match = [{ path_prefix = "/q/" }]
[[limit]]
name = "per-path"
class = "q"
zone = "paths"
key = ["path"]
"""

HTTP_REDIRECTS = """
    log_format weir '$status|$weir_action|$weir_limit|$weir_key|$request_uri|$uri';
    weir_policy %DIR%/policy.toml;
    weir_req_zone $uri zone=uz:1m rate=1r/m;
    weir_req_zone $uri zone=dz:1m rate=1r/m;
    weir_conn_zone $uri zone=cz:1m;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        access_log %DIR%/logs/access.log weir;
        error_page 429 503 /busy.html;
        location /u/ { weir_req zone=uz; try_files /f =404; }
        location /ud/ { weir_req zone=dz; weir_req_dry_run on; try_files /absent /f; }
        location /c/ { weir_conn cz 1; proxy_pass http://127.0.0.1:%BACKEND%; }
        location /q/ { weir on; try_files /f =404; }
        location = /busy.html { }
        location = /f { }
    }
"""


def test_access_log_redirects(module, env=None):
    """$weir_key after internal redirects: the key the limit was evaluated with (and charged),
    not the one the redirected request's variables would make (error_page to /busy.html,
    try_files to /f), for weir_req, a dry-run weir_req, weir_conn and a policy limit."""
    backend = run.Backend()
    http = HTTP_REDIRECTS.replace("%BACKEND%", str(backend.port))
    ngx = Nginx(module, http, env=env, files={"policy.toml": POLICY_REDIRECTS, "html/f": "x",
                                              "html/busy.html": "busy"})
    try:
        ngx.start()
        got = [request(ngx.port, "GET", t)[0] for t in ("/u/x", "/u/x", "/ud/y", "/ud/y",
                                                        "/q/z", "/q/z")]
        check(got == [200, 503, 200, 200, 200, 429], f"statuses: {got}")
        # weir_conn: one request held by the backend, a second on the same key refused
        held = run.send(ngx.port, "GET", "/c/w", [("X-Weir-Step", "held")])
        for _ in range(500):
            if backend.seen("held") is not None:
                break
            time.sleep(0.01)
        check(backend.seen("held") is not None, "the held request did not reach the backend")
        got = request(ngx.port, "GET", "/c/w")[0]
        check(got == 503, f"a second /c/w while one is held: {got}")
        backend.event("held").set()
        check(run.read_response(held)[0] == 200, "the held request")
        with open(ngx.path("logs", "access.log")) as f:
            lines = [line.rstrip("\n").split("|") for line in f]
        text = "\n".join("|".join(x) for x in lines)
        limited = {(t, a): (lim, key, uri) for _, a, lim, key, t, uri in lines if lim != "-"}
        for target, action, name, uri in (("/u/x", "reject", "uz", "/busy.html"),
                                          ("/ud/y", "dry-run-reject", "dz", "/f"),
                                          ("/c/w", "reject", "cz", "/busy.html"),
                                          ("/q/z", "reject", "per-path", "/busy.html")):
            check((target, action) in limited, f"no {action} line for {target}:\n{text}")
            lim, key, logged_uri = limited[(target, action)]
            check(lim == name and logged_uri == uri, f"{target}: {lim} {logged_uri}:\n{text}")
            check(target in key and uri not in key,
                  f"{target}: $weir_key {key!r} is not the charged key:\n{text}")
        ngx.check_log()
    finally:
        backend.server.shutdown()
        ngx.cleanup()
    return ("after error_page and try_files, $weir_key shows the charged key (weir_req, "
            "dry-run weir_req, weir_conn, policy limit), not the redirected $uri")

"""charge_on_status through real nginx (run by run.py: charge-on-status): one limit over two
locations of a server, one answering 401 and one 200; only the 401s are charged (with the
response status, once its header is sent), so after the limit's count of 401s the key is
refused on both, while any number of 200s never count; nginx -s reload keeps the count.
charge-on-status-h2: the same over HTTP/2 with a client whose flow control holds every body."""

import re
import socket
import subprocess
import time

import run
from h2c import H2c
from run import Nginx, check, request

POLICY = """[zones.failures]
size = "64k"
algorithm = "sliding"
events = 3
window = "1h"
[[limit]]
name = "login"
class = "*"
zone = "failures"
charge_on_status = [401]
"""

HTTP = """
    weir_policy %DIR%/policy.toml;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        location = /login { weir on; try_files /absent =401; }
        location = /ok { weir on; try_files /f =404; }
    }
"""


def test_charge_on_status(module, env=None):
    ngx = Nginx(module, HTTP, files={"policy.toml": POLICY, "html/f": "x"}, workers=2,
                env=env)
    try:
        ngx.start()
        got = [request(ngx.port, "GET", "/ok")[0] for _ in range(10)]
        check(got == [200] * 10, f"200s are never charged: {got}")
        got = [request(ngx.port, "GET", "/login")[0] for _ in range(2)]
        check(got == [401] * 2, f"the first 401s: {got}")
        ngx.reload()
        got = [request(ngx.port, "GET", "/login")[0] for _ in range(2)]
        check(got == [401, 429], f"the third 401 fills the limit (kept across reload): {got}")
        got = [request(ngx.port, "GET", p)[0] for p in ("/ok", "/login", "/ok")]
        check(got == [429] * 3, f"the key is refused everywhere the limit applies: {got}")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return ("200s never count; after 3 responses of 401 (across nginx -s reload) the key "
            "is refused with 429 on both locations")


# ---- over HTTP/2, with bodies the client never lets through ------------------------------

POLICY_H2 = POLICY + """[zones.gone]
size = "64k"
algorithm = "sliding"
events = 1
window = "1h"
[classes.hang]
match = [{ path_prefix = "/hang" }]
[[limit]]
name = "gone"
class = "hang"
zone = "gone"
charge_on_status = [499]
"""

HTTP_H2 = """
    weir_policy %DIR%/policy.toml;
    server {
        %LISTEN%
        root %DIR%/html;
        location = /login { weir on; error_page 401 /big.html; try_files /absent =401; }
        location = /soft { weir on; error_page 401 =200 /f; try_files /absent =401; }
        %AUTHD%
        location = /allow { return 204; }
        location = /hang { weir on; proxy_pass http://127.0.0.1:%BLACKHOLE%; }
        location = /hang-probe { weir on; try_files /f =404; }
    }
"""


def h2_support():
    """(listen line for h2c, auth_request built in), or None when nginx has no HTTP/2."""
    out = subprocess.run([run.NGINX, "-V"], capture_output=True, text=True).stderr
    if "--with-http_v2_module" not in out:
        return None
    v = tuple(int(x) for x in re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", out).groups())
    listen = ("listen 127.0.0.1:%PORT%; http2 on;" if v >= (1, 25, 1)
              else "listen 127.0.0.1:%PORT% http2;")
    return listen, "--with-http_auth_request_module" in out


def test_charge_on_status_h2(module, env=None):
    """charge_on_status over h2c with SETTINGS_INITIAL_WINDOW_SIZE = 0: no response body ever
    flows, so no stream ends; the charges land when each response header is sent. Streams
    are opened one at a time, each after the previous one's header arrived: the first three
    401s fill the limit (limit 3), the next streams are refused. A 401 that error_page turns
    into 200 never counts; an auth_request subrequest's 204 does not take its main request's
    charge; a stream the client cancels before its header still charges at its end (499)."""
    support = h2_support()
    if support is None:
        return "SKIPPED: this nginx has no HTTP/2 (--with-http_v2_module)"
    listen, auth = support
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(8)
    authd = ("location = /authd { weir on; auth_request /allow; try_files /absent =401; }"
             if auth else "")
    http = (HTTP_H2.replace("%LISTEN%", listen).replace("%AUTHD%", authd)
            .replace("%BLACKHOLE%", str(blackhole.getsockname()[1])))
    ngx = Nginx(module, http, env=env,
                files={"policy.toml": POLICY_H2, "html/f": "x", "html/big.html": "z" * 262144})
    conns = []
    try:
        ngx.start()
        # a request freed before its header was sent is charged at its end, with 499
        h = H2c(ngx.port)
        conns.append(h)
        hang = h.get("/hang")
        time.sleep(0.2)
        h.cancel(hang)
        got = []
        for _ in range(40):
            got.append(h.status(h.get("/hang-probe")))
            if got[-1] == 429:
                break
            time.sleep(0.1)
        check(got[-1] == 429, f"a cancelled stream's 499 is charged: probes {got}")

        h = H2c(ngx.port)
        conns.append(h)
        t = time.monotonic()
        paths = ["/soft"] * 3 + ["/authd" if auth else "/login", "/login", "/login"]
        paths += ["/login", "/soft", "/login"]
        got = [h.status(h.get(p)) for p in paths]
        took = time.monotonic() - t
        want = [200] * 3 + [401] * 3 + [429] * 3
        check(got == want, "zero-window streams, one after another: "
              + ", ".join(f"{p} {s}" for p, s in zip(paths, got)) + f"; expected {want}")
        check(took < 5, f"{len(paths)} streams took {took:.1f}s")
        ngx.check_log()
    finally:
        for h in conns:
            h.close()
        blackhole.close()
        ngx.cleanup()
    return (f"h2c, zero stream window: {len(paths)} streams, no body sent, the limit refuses "
            f"after 3 401s ({took * 1000:.0f} ms); error_page's final 200 never counts"
            + ("; an auth_request 204 takes nothing" if auth else "; no auth_request module")
            + "; a cancelled stream is charged 499")

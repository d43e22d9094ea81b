"""nginx checks for peers without an IP address and for failure_mode (run by run.py).

unix_peers: a real `listen unix:` socket, requests over it from Python; the peer is the
policy's local client, and "unix:" in trusted_proxies believes its X-Forwarded-For.
failure_mode: an evaluation forced to fail (the test build's peer hook given a peer that is
no address) answers 503 with failure_mode = "closed" and passes, logged, with "open".
"""

import socket

from run import Nginx, check, read_response, request

LIMITED = """
[zones.z]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[[limit]]
class = "*"
zone = "z"
name = "per-ip"
"""


def unix_request(path, headers=()):
    """GET / over the unix socket at path; the status."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    lines = ["GET / HTTP/1.1", "Host: localhost", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers]
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    return read_response(s)[0]


def serve(module, policy, hooks="", env=None):
    http = f"""
    weir_policy %DIR%/policy.toml;
    {hooks}
    server {{
        listen 127.0.0.1:%PORT%;
        listen unix:%DIR%/s.sock;
        root %DIR%/html;
        location / {{ weir on; try_files /f =404; }}
    }}
"""
    return Nginx(module, http, env=env, files={"policy.toml": policy, "html/f": "x"})


def test_unix_peers(module, env=None):
    # Not trusted: the header is ignored, every request is the one local client (burst 2).
    ngx = serve(module, 'failure_mode = "closed"\ntrusted_proxies = ["10.0.0.0/8"]\n'
                + LIMITED + "burst = 2\nnodelay = true\n", env=env)
    try:
        ngx.start()
        sock = ngx.path("s.sock")
        got = [unix_request(sock, [("X-Forwarded-For", f"203.0.113.{i}")]) for i in range(10)]
        check(got == [200] * 3 + [429] * 7, f"untrusted unix peer, burst 2: {got}")
        got = request(ngx.port)[0]
        check(got == 200, f"127.0.0.1 is not the local client: {got}")
        ngx.check_log()
    finally:
        ngx.cleanup()
    # Trusted: the forwarded address is the client; without it, the local client.
    ngx = serve(module, 'trusted_proxies = ["unix:"]\n' + LIMITED, env=env)
    try:
        ngx.start()
        sock = ngx.path("s.sock")
        xff = [("X-Forwarded-For", "203.0.113.9")]
        got = [unix_request(sock, xff), unix_request(sock, xff),
               unix_request(sock, [("X-Forwarded-For", "203.0.113.10")]),
               unix_request(sock), unix_request(sock)]
        check(got == [200, 429, 200, 200, 429], f"trusted unix peer: {got}")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return ("listen unix: requests are limited as the local client; \"unix:\" trusted "
            "forwards X-Forwarded-For")


def test_failure_mode(test_module, env=None):
    hooks = "weir_test_clock $http_x_weir_test_now $http_x_weir_test_peer;"
    broken = [("X-Weir-Test-Peer", "not-an-address")]
    allow = [r"weir_engine_evaluate\(\) failed"]
    for mode, want in (("closed", 503), ("open", 200)):
        ngx = serve(test_module, f'failure_mode = "{mode}"\n' + LIMITED, hooks, env)
        try:
            ngx.start()
            got = [request(ngx.port, headers=broken)[0], request(ngx.port)[0],
                   request(ngx.port, headers=broken)[0]]
            # The failed evaluations charge nothing: the one working request passes.
            check(got == [want, 200, want], f"failure_mode {mode}: {got}")
            line = ("rejecting the request" if mode == "closed"
                    else "letting the request through")
            check(ngx.error_log().count(f"weir_engine_evaluate() failed (-2), {line}") == 2,
                  f"failure_mode {mode}: failure not logged:\n{ngx.error_log()[-2000:]}")
            ngx.check_log(allow)
        finally:
            ngx.cleanup()
    return "a failed evaluation answers 503 with failure_mode closed, passes with open (logged)"

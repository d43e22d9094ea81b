"""Ban periods through real nginx (run by run.py: bans): a key rejected `after` times is
banned; the ban refuses it in every worker, is listed in `?format=json` with its key, counted
as `banned`, logged once in the error log with its key, and survives `nginx -s reload`."""

import http.client
import json

from run import Nginx, check, hdr, request

POLICY = """[zones.pz]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[[limit]]
name = "login"
class = "*"
zone = "pz"
log_level = "warn"
ban = { after = 3, within = "1m", duration = "10m" }
"""

HTTP = """
    weir_policy %DIR%/policy.toml;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        location = /metrics { weir_status; }
        location / { weir on; try_files /f =404; }
    }
"""

BAN_LINE = 'banning key "127.0.0.1" for 600s by weir limit "login"'


def status(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/metrics?format=json")
        r = c.getresponse()
        check(r.status == 200, f"status: {r.status}")
        return json.loads(r.read())["limits"][0]
    finally:
        c.close()


def banned_view(ngx, when):
    """The limit's entry, checked to list the one ban of 127.0.0.1."""
    lim = status(ngx.port)
    bans = lim.get("bans")
    check(isinstance(bans, list) and len(bans) == 1 and bans[0]["key"] == "127.0.0.1"
          and 0 < bans[0]["remaining_s"] <= 600, f"{when}: bans {bans}")
    return lim


def test_bans(module):
    ngx = Nginx(module, HTTP, files={"policy.toml": POLICY, "html/f": "x"}, workers=2)
    try:
        ngx.start()
        got = [request(ngx.port, "GET", "/")[0] for _ in range(4)]
        check(got == [200, 429, 429, 429], f"before the ban: {got}")
        check(status(ngx.port)["rejected"] == 3, "three rejections")
        # Banned: refused outright by every worker, without being charged or counted rejected.
        got = [request(ngx.port, "GET", "/")[0] for _ in range(6)]
        check(got == [429] * 6, f"banned: {got}")
        lim = banned_view(ngx, "banned")
        check((lim["rejected"], lim["banned"]) == (3, 6), f"counts: {lim}")
        st, hdrs = request(ngx.port, "GET", "/")
        retry = int(hdr(hdrs, "Retry-After") or 0)
        check(st == 429 and 590 <= retry <= 600, f"Retry-After of a banned request: {st} {retry}")
        log = ngx.error_log()
        check(log.count("banning key") == 1 and BAN_LINE in log and "[warn]" in
              next(l for l in log.splitlines() if "banning key" in l), f"one ban line:\n{log}")
        check("limiting requests, banned key, by weir limit \"login\"" in log, f"banned lines:\n{log}")

        ngx.reload()
        got = [request(ngx.port, "GET", "/")[0] for _ in range(3)]
        check(got == [429] * 3, f"after reload: {got}")
        lim = banned_view(ngx, "after reload")
        check((lim["rejected"], lim["banned"]) == (3, 10), f"counts after reload: {lim}")
        check(ngx.error_log().count("banning key") == 1, "still one ban line after reload")
        ngx.check_log()
    finally:
        ngx.cleanup()
    return ("a key rejected 3 times is banned in every worker, listed in ?format=json, "
            "counted as banned, logged once with its key, and still banned and listed "
            "after nginx -s reload")

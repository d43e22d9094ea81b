"""Key operations through real nginx (run by run.py: keys). A plain `weir_status` location (a
Prometheus scrape location set up before writes existed) inspects keys but refuses POST reset
and unban with 403, changing and logging nothing. On a `weir_status write=on` location, a
rejected key inspects as rejected (retry_after_s > 0), a POST reset lets it pass again, a ban
inspects as banned and `action=unban` lifts it and takes it off `?format=json`; each change
logs one audit line at the limit's level; a POST from an address the location denies gets
403, and so does a cross-site form POST from an allowed address (a page in an operator's
browser), or one without the Weir-Key-Action header; bad key text is 400, an unknown limit
404, a GET asking for a change 405. `weir key` asks the same endpoint (inspect, --reset,
--json, an error's exit status)."""

import http.client
import json
import subprocess
import urllib.parse

from bans import POLICY
from run import Nginx, check, request


HTTP = """
    weir_policy %DIR%/policy.toml;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        location = /metrics { weir_status; }
        location = /internal { allow 127.0.0.1; deny all; weir_status; }
        location = /admin {
            limit_except GET { allow 127.0.0.1; deny all; }
            weir_status write=on;
        }
        location / { weir on; try_files /f =404; }
    }
"""

KEY = "/admin?limit=login&key=127.0.0.1"
RESET_LINE = 'resetting key "127.0.0.1" of weir limit "login"'
UNBAN_LINE = 'lifting ban of key "127.0.0.1" of weir limit "login"'
# A form another site's page makes an operator's browser send.
CROSS_SITE = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site",
              "Content-Type": "application/x-www-form-urlencoded"}


def ask(port, method, target, source="127.0.0.1", headers=None, body=None):
    """(status, JSON body or None) of one request sent from `source`. A POST with an action
    names it in Weir-Key-Action (as `weir key` does) unless `headers` are given."""
    if headers is None:
        headers = {}
        for action in ("reset", "unban"):
            if method == "POST" and target.endswith("action=" + action):
                headers["Weir-Key-Action"] = action
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        c.request(method, target, body=body, headers=headers)
        r = c.getresponse()
        body = r.read()
        ctype = r.getheader("Content-Type", "")
        return r.status, (json.loads(body) if ctype == "application/json" and body else None)
    finally:
        c.close()


def hit(port):
    return request(port, "GET", "/")[0]


def weir_key(weir, port, *args):
    p = subprocess.run([weir, "key", f"127.0.0.1:{port}/admin", *args],
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def test_keys(module, weir, env=None):
    ngx = Nginx(module, HTTP, files={"policy.toml": POLICY, "html/f": "x"}, workers=2, env=env)
    try:
        ngx.start()
        port = ngx.port
        check([hit(port), hit(port)] == [200, 429], "one pass, then rejected")
        st, j = ask(port, "GET", KEY)
        check(st == 200 and j["version"] == 1 and j["key"] == "127.0.0.1"
              and j["remaining"] == 0 and j["retry_after_s"] > 0 and not j["banned"]
              and j["action"] == "inspect", f"inspect: {st} {j}")
        st, _ = ask(port, "HEAD", KEY)
        check(st == 200, f"HEAD inspect: {st}")

        # Plain weir_status locations are read-only: inspecting works, changes are refused.
        for loc in ("/metrics", "/internal"):
            plain = KEY.replace("/admin", loc)
            st, j = ask(port, "GET", plain)
            check(st == 200 and j["remaining"] == 0, f"GET {loc}: {st} {j}")
            for action in ("reset", "unban"):
                st, j = ask(port, "POST", f"{plain}&action={action}")
                check(st == 403 and "write=on" in j["error"], f"POST {action} {loc}: {st} {j}")
        unchanged = lambda: ask(port, "GET", KEY)[1]["remaining"] == 0
        check(unchanged(), "a refused reset changed the key")
        # An allowed address, but a page of another site: a form POST (no Weir-Key-Action,
        # which a page cannot send cross-site), the same with the header, and a same-origin
        # form.
        for headers in [CROSS_SITE, dict(CROSS_SITE, **{"Weir-Key-Action": "reset"}),
                        {"Origin": f"http://127.0.0.1:{port}", "Weir-Key-Action": "reset",
                         "Content-Type": "text/plain"}]:
            st, j = ask(port, "POST", KEY + "&action=reset", headers=headers, body="a=b")
            check(st == 403 and j["error"], f"cross-site POST {headers}: {st} {j}")
        st, j = ask(port, "POST", KEY + "&action=reset", headers={})
        check(st == 403 and "Weir-Key-Action: reset" in j["error"], f"no header: {st} {j}")
        check(unchanged() and RESET_LINE not in ngx.error_log(),
              "refused POSTs change and log nothing")

        st, _ = ask(port, "POST", KEY + "&action=reset", source="127.0.0.2")
        check(st == 403, f"POST from a denied address: {st}")
        check(RESET_LINE not in ngx.error_log(), "a denied POST changes and logs nothing")
        st, j = ask(port, "POST", KEY + "&action=reset")
        check(st == 200 and j["changed"] and j["retry_after_s"] == 0 and j["action"] == "reset",
              f"reset: {st} {j}")
        check(hit(port) == 200, "passes after the reset")

        # Three rejections ban the key (the third starts the ban).
        check([hit(port) for _ in range(3)] == [429] * 3, "rejected three times")
        st, j = ask(port, "GET", KEY)
        check(j["banned"] and 590 <= j["ban_left_s"] <= 600 and j["retry_after_s"] >= 590,
              f"banned: {j}")
        st, status = ask(port, "GET", "/admin?format=json")
        check([b["key"] for b in status["limits"][0]["bans"]] == ["127.0.0.1"],
              f"listed: {status['limits'][0].get('bans')}")
        st, j = ask(port, "POST", KEY + "&action=unban")
        check(st == 200 and not j["banned"] and j["changed"] and j["action"] == "unban",
              f"unban: {st} {j}")
        st, status = ask(port, "GET", "/metrics?format=json")
        check(status["limits"][0].get("bans") == [], f"unlisted: {status['limits'][0]}")
        # The rate still refuses (the last pass was just now): reset it with weir key.
        rc, out, err = weir_key(weir, port, "login", "127.0.0.1", "--reset")
        check(rc == 0 and "reset" in out and "banned       no" in out, f"weir key --reset: {rc} {out} {err}")
        check(hit(port) == 200, "passes after unban and reset")

        rc, out, err = weir_key(weir, port, "login", "127.0.0.1", "--json")
        check(rc == 0 and json.loads(out)["remaining"] == 0, f"weir key --json: {rc} {out} {err}")
        rc, out, err = weir_key(weir, port, "login", "127.0.0.1")
        check(rc == 0 and "retry after  " in out and "remaining    0" in out, f"weir key: {out}")
        rc, out, err = weir_key(weir, port, "nope", "127.0.0.1")
        check(rc == 1 and "HTTP 404" in err and "no weir limit named" in err,
              f"weir key on an unknown limit: {rc} {err}")

        for method, target, want in [
            ("GET", "/admin?limit=login&key=not-an-ip", 400),
            ("GET", "/admin?limit=login&key=10.0.0.0%2F8", 400),
            ("GET", "/admin?limit=nope&key=127.0.0.1", 404),
            ("GET", KEY + "&action=reset", 405),
            ("POST", KEY, 400),
            ("POST", KEY + "&action=zap", 400),
        ]:
            st, j = ask(port, method, target)
            check(st == want and j and j.get("error"), f"{method} {target}: {st} {j}")
        st, _ = ask(port, "POST", "/metrics?format=json")
        check(st == 405, f"POST on the status itself: {st}")

        log = ngx.error_log()
        lines = [l for l in log.splitlines() if "of weir limit" in l]
        check(log.count(RESET_LINE) == 2 and log.count(UNBAN_LINE) == 1,
              "one audit line per change:\n" + "\n".join(lines))
        check(all("[warn]" in l and "client: 127.0.0.1" in l for l in lines),
              "audit lines at the limit's level, with nginx's context:\n" + "\n".join(lines))
        ngx.check_log()
    finally:
        ngx.cleanup()
    return ("plain weir_status locations inspect and refuse POST reset/unban (403); with "
            "write=on inspect shows a rejection and a ban, POST reset and unban lift them (the "
            "ban leaves ?format=json), one audit line each, 403 for a denied address, a "
            "cross-site form and a POST without Weir-Key-Action, 400/404/405 for bad requests; "
            "weir key inspects, resets and reports errors")


TEXT_POLICY = """[zones.z]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[classes.s]
match = [{ path_prefix = "/s" }]
[classes.h]
match = [{ path_prefix = "/h" }]
[[limit]]
name = "session"
class = "s"
zone = "z"
key = "cookie:session"
log_level = "warn"
ban = { after = 2, within = "1m", duration = "10m" }
[[limit]]
name = "odd"
class = "h"
zone = "z"
key = ["header:x-k", "path"]
[key_text]
hide = ["cookie"]
"""

SECRET = "SECRET-7f3a"
# A header value the engine's old text mangled in logs: quotes, a backslash, a space, a
# non-ASCII byte, ` path=/…` and a marker's spelling.
ODD = 'a"b\\c d path=/x (absent) \xe9'


def test_key_text(module, weir, env=None):
    """Key text through real nginx: a secret session cookie never shows in the status, the
    error log (its ban line included) or the access log, yet the logged text lifts the ban and
    resets the key; a header key logged with nginx's default escaping (and escape=json) resets
    its key through `weir key` and a key operation."""
    http = HTTP.replace(
        "server {",
        "log_format k '$weir_limit|$weir_key';\n"
        "    log_format kj escape=json '{\"k\":\"$weir_key\"}';\n"
        "    server {\n"
        "        access_log %DIR%/logs/key.log k;\n"
        "        access_log %DIR%/logs/key.json kj;", 1)
    ngx = Nginx(module, http, files={"policy.toml": TEXT_POLICY, "html/f": "x"}, env=env)
    try:
        ngx.start()
        port = ngx.port
        cookie = [("Cookie", f"a=1; session={SECRET}")]
        got = [request(port, "GET", "/s", cookie)[0] for _ in range(3)]
        check(got == [200, 429, 429], f"one pass, two rejections (the second bans): {got}")
        st, status = ask(port, "GET", "/metrics?format=json")
        lim = status["limits"][0]
        bans = [b["key"] for b in lim["bans"]]
        with open(ngx.path("logs", "key.log"), encoding="latin-1") as f:
            logged = [l.rstrip("\n").split("|", 1)[1] for l in f if l.startswith("session|")]
        everything = json.dumps(status) + ngx.error_log() + "\n".join(logged)
        check(SECRET not in everything, "the secret shows:\n" + everything[-2000:])
        check(len(bans) == 1 and bans[0] == logged[-1] and bans[0].startswith("cookie:session=~")
              and " #" in bans[0], f"the ban and the log name the key alike: {bans} {logged}")
        check(f'banning key "{bans[0]}" for 600s by weir limit "session"' in ngx.error_log(),
              "the ban line names the hidden key")
        rc, out, err = weir_key(weir, port, "session", logged[-1], "--unban")
        check(rc == 0 and "banned       no" in out, f"weir key --unban: {rc} {out} {err}")
        rc, out, err = weir_key(weir, port, "session", lim["last_1m"]["keys"][0]["key"],
                                "--reset")
        check(rc == 0, f"weir key --reset with the status's key: {rc} {out} {err}")
        check(request(port, "GET", "/s", cookie)[0] == 200, "passes after unban and reset")

        odd = [("X-K", ODD)]
        got = [request(port, "GET", "/h/1", odd)[0] for _ in range(2)]
        check(got == [200, 429], f"the header key: {got}")
        with open(ngx.path("logs", "key.log"), encoding="latin-1") as f:
            text = [l.rstrip("\n").split("|", 1)[1] for l in f if l.startswith("odd|")][-1]
        with open(ngx.path("logs", "key.json"), encoding="latin-1") as f:
            text_json = json.loads(f.readlines()[-1])["k"]
        check(text == text_json and "\\" not in text and '"' not in text
              and text.startswith("header:x-k=a%22b%5Cc%20d%20path=/x%20%28absent%29%20"),
              f"the logged text is the same with both escapings: {text!r} {text_json!r}")
        rc, out, err = weir_key(weir, port, "odd", text)
        check(rc == 0 and "remaining    0" in out, f"weir key inspects it: {rc} {out} {err}")
        st, j = ask(port, "POST", "/admin?limit=odd&action=reset&key="
                    + urllib.parse.quote(text, safe=""), headers={"Weir-Key-Action": "reset"})
        check(st == 200 and j["changed"] and j["key"] == text, f"reset: {st} {j}")
        check(request(port, "GET", "/h/1", odd)[0] == 200, "passes after the reset")
        audit = [l for l in ngx.error_log().splitlines() if "of weir limit" in l]
        check(all("\\\\" not in l for l in audit) and any(f'"{text}"' in l for l in audit),
              "audit lines quote the text as it is:\n" + "\n".join(audit))
        ngx.check_log()
    finally:
        ngx.cleanup()
    return ("a secret cookie never shows in the status, error or access log, and its logged "
            "text unbans and resets it; a header key logged with default and json escaping "
            "resets its key (weir key, POST)")

"""charge_on_status through real nginx (run by run.py: charge-on-status): one limit over two
locations of a server, one answering 401 and one 200; only the 401s are charged (in the
request's end, with the response status), so after the limit's count of 401s the key is
refused on both, while any number of 200s never count; nginx -s reload keeps the count."""

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

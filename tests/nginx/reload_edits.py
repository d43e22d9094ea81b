"""Reloads with edited policies and rates (run by run.py: reload-edits, reload-rates).

Each check drives a real nginx (2 workers) through `kill -HUP` reloads and asserts what the
operator sees: the master survives, a zone whose layout changed starts fresh with a notice
naming it, unchanged zones keep their state, an edit that cannot apply is refused with the
running configuration kept, and a changed GCRA rate gives stock limit_req's verdicts.
"""

import os
import re
import signal
import time

from run import Failure, Nginx, alive, check, request

ZONES = {
    # name: (zone body before, zone body after the first reload)
    "keep": ('algorithm = "gcra"\nrate = "1r/m"', None),
    "s": ('algorithm = "sliding"\nevents = 3\nwindow = "1m"',
          'algorithm = "sliding"\nevents = 3\nwindow = "2m"'),
    "g": ('algorithm = "gcra"\nrate = "1r/m"',
          'algorithm = "sliding"\nevents = 3\nwindow = "1m"'),
    "l": ('algorithm = "log"\nevents = 3\nwindow = "1m"',
          'algorithm = "log"\nevents = 4\nwindow = "1m"'),
    "lw": ('algorithm = "log"\nevents = 3\nwindow = "1m"',
           'algorithm = "log"\nevents = 3\nwindow = "2m"'),
    "size": ('algorithm = "sliding"\nevents = 3\nwindow = "1m"', None),
    "c": ('algorithm = "sliding"\nevents = 3\nwindow = "1m"\nscope = "cluster"\n'
          'redis = "redis://127.0.0.1:1/0"\nexpected_nodes = 1',
          'algorithm = "sliding"\nevents = 3\nwindow = "2m"\nscope = "cluster"\n'
          'redis = "redis://127.0.0.1:1/0"\nexpected_nodes = 1'),
    "local": ('algorithm = "sliding"\nevents = 3\nwindow = "1m"',
              'algorithm = "sliding"\nevents = 3\nwindow = "1m"\nscope = "cluster"\n'
              'redis = "redis://127.0.0.1:1/0"\nexpected_nodes = 1'),
}
LAYOUTS = {  # the notices of the first reload
    "s": ("sliding window=1m size=65536", "sliding window=2m size=65536"),
    "g": ("gcra size=65536", "sliding window=1m size=65536"),
    "l": ("sliding_log events=3 window=1m size=65536",
          "sliding_log events=4 window=1m size=65536"),
    "lw": ("sliding_log events=3 window=1m size=65536",
           "sliding_log events=3 window=2m size=65536"),
    "size": ("sliding window=1m size=65536", "sliding window=1m size=131072"),
    "c": ("sliding window=1m scope=cluster size=65536",
          "sliding window=2m scope=cluster size=65536"),
    "local": ("sliding window=1m size=65536", "sliding window=1m scope=cluster size=65536"),
}


def policy(zones, limits, big=()):
    """A policy of 64k zones (128k for those in big), a class /NAME/ per zone, limits by name."""
    text = ""
    for name, body in zones.items():
        size = "128k" if name in big else "64k"
        text += f'[zones.{name}]\nsize = "{size}"\n{body}\n'
        text += f'[classes.{name}]\nmatch = [{{ path_prefix = "/{name}/" }}]\n'
    for name, zone in limits.items():
        burst = "burst = 2\nnodelay = true\n" if "gcra" in zones[zone] else ""
        text += (f'[[limit]]\nname = "{name}"\nclass = "{zone}"\nzone = "{zone}"\n'
                 f'key = "global"\n{burst}')
    return text


HTTP = """
    weir_policy %DIR%/p.toml;
    weir_req_zone $host zone=d:SIZE ALG;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        location / { weir on; try_files /f =404; }
        location /d/ { weir_req zone=d; try_files /f =404; }
    }
"""


def statuses(ngx, zone, n):
    return [request(ngx.port, "GET", f"/{zone}/x")[0] for _ in range(n)]


def exhaust(ngx, zone):
    got = statuses(ngx, zone, 4)
    check(got == [200, 200, 200, 429], f"zone {zone} before reload: {got}")


def worker(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().startswith(b"nginx: worker")
    except OSError:
        return False


def wait_log(ngx, pattern, what, limit=15.0):
    t = time.time()
    while time.time() - t < limit:
        m = re.search(pattern, ngx.error_log())
        if m:
            return m
        time.sleep(0.05)
    raise Failure(f"{what}: no {pattern!r} in the error log:\n" + ngx.error_log()[-3000:])


def test_reload_edits(module, env=None):
    """Every field of a zone's layout edited on reload: fresh zones with notices, kept zones."""
    before = {z: b for z, (b, _) in ZONES.items()}
    after = {z: a or b for z, (b, a) in ZONES.items()}
    limits = {z: z for z in ZONES}
    ngx = Nginx(module, HTTP.replace("ALG", "rate=1r/m").replace("SIZE", "1m"), workers=2,
                env=env, files={"p.toml": policy(before, limits), "html/f": "x"})

    workers = set()  # every worker seen, stopped at the end should the master have died

    def reload(text):
        with open(ngx.path("p.toml"), "w") as f:
            f.write(text)
        master = ngx.pid
        workers.update(ngx.workers_pids())
        ngx.reload()
        check(alive(master), "the master exited on reload:\n" + ngx.error_log()[-3000:])

    try:
        ngx.start()
        for z in ZONES:
            exhaust(ngx, z)
        check(statuses(ngx, "d", 2) == [200, 503], "directive zone d before reload")

        # 1. Every layout field changed at once (size: 64k -> 128k).
        reload(policy(after, limits, big=("size",)))
        for z, (old, new) in LAYOUTS.items():
            wait_log(ngx, rf'\[notice\].*weir zone "{z}" starts with fresh state: its layout '
                     rf'changed from "{old}" to "{new}"', f"zone {z}")
            got = statuses(ngx, z, 1)
            check(got == [200], f"zone {z} changed its layout but kept its state: {got}")
        check(statuses(ngx, "keep", 1) == [429], "zone keep lost its state on reload")
        check("weir zone \"keep\" starts" not in ngx.error_log(), "zone keep reported fresh")

        # 2. Zones and limits added, removed and renamed (the counters' fingerprint).
        zones = {"keep": after["keep"], "s": after["s"], "new": ZONES["s"][0]}
        reload(policy(zones, {"renamed": "keep", "s": "s", "new": "new"}))
        wait_log(ngx, r"\[notice\].*weir counters start from zero: the policy's limits changed",
                 "counters")
        check(statuses(ngx, "keep", 1) == [429], "zone keep lost its state on the second reload")
        exhaust(ngx, "new")
        check(statuses(ngx, "g", 5) == [200] * 5, "a removed zone still limits")
        got = statuses(ngx, "s", 3)
        check(got == [200, 200, 429], f"zone s (1 of 3 used) lost its state: {got}")

        # 3. An edit weir cannot apply is refused like a bad nginx.conf; the running
        # configuration (and its state) stays.
        bad = policy(zones, {"renamed": "keep", "s": "s", "new": "new"}) + (
            '[zones.cl]\nsize = "64k"\nalgorithm = "sliding"\nevents = 6\nwindow = "1m"\n'
            'scope = "cluster"\nredis = "redis://127.0.0.1:1/0"\nexpected_nodes = 3\n'
            '[[limit]]\nname = "heavy"\nclass = "*"\nzone = "cl"\nkey = "global"\ncost = 3\n')
        with open(ngx.path("p.toml"), "w") as f:
            f.write(bad)
        running = ngx.workers_pids()
        os.kill(ngx.pid, signal.SIGHUP)
        wait_log(ngx, r"\[emerg\].*weir policy.*(cost 3 exceeds|p\.toml).* in "
                 r".*nginx\.conf:\d+", "refused reload")
        time.sleep(0.5)
        check(alive(ngx.pid), "the master exited on a refused reload")
        check(ngx.workers_pids() == running, "a refused reload replaced the workers")
        check(statuses(ngx, "keep", 1) == [429], "a refused reload lost state")
        check(statuses(ngx, "heavy", 1) == [200], "a refused reload applied")
        # ... and the next good reload works (the master still owns its workers).
        reload(policy(zones, {"renamed": "keep", "s": "s", "new": "new"}))
        check(statuses(ngx, "keep", 1) == [429], "zone keep lost its state after a refusal")

        # 4. A directive zone is an engine zone too: another algorithm starts it fresh with
        # the same notice as a policy zone (it used to refuse the reload; changed on purpose
        # when weir_req_zone went through the engine), and a resize keeps the new algorithm.
        ngx.write_conf(HTTP.replace("ALG", "events=3 window=1m").replace("SIZE", "1m"))
        reload(policy(zones, {"renamed": "keep", "s": "s", "new": "new"}))
        wait_log(ngx, r'\[notice\].*weir zone "d" starts with fresh state: its layout changed '
                 r'from "gcra size=\d+" to "sliding window=1m size=\d+"', "directive zone")
        check(statuses(ngx, "d", 4) == [200] * 3 + [503], "zone d did not start fresh as sliding")
        ngx.write_conf(HTTP.replace("ALG", "events=3 window=1m").replace("SIZE", "2m"))
        reload(policy(zones, {"renamed": "keep", "s": "s", "new": "new"}))
        check(statuses(ngx, "d", 4) == [200] * 3 + [503], "a resized zone d kept its state")
        ngx.check_log(allow=[r"weir policy.*(cost 3 exceeds|p\.toml)"])
        return (f"{len(LAYOUTS)} layout edits start fresh with a notice, kept zones keep state, "
                "zones and limits added/removed/renamed, an impossible edit is refused")
    finally:
        ngx.cleanup()
        for pid in workers:
            if alive(pid) and worker(pid):
                os.kill(pid, signal.SIGKILL)


RATE_HTTP = """
    limit_req_zone $http_x_key zone=stock:1m rate=RATE;
    weir_req_zone $http_x_key zone=wd:1m rate=RATE;
    limit_req_status 503;
    weir_req_status 503;
    weir_policy %DIR%/p.toml;
    server {
        listen 127.0.0.1:%PORT%;
        root %DIR%/html;
        location = /stock { limit_req zone=stock burst=5 nodelay; try_files /f =404; }
        location = /directive { weir_req zone=wd burst=5 nodelay; try_files /f =404; }
        location = /policy { weir on; try_files /f =404; }
    }
"""
RATE_POLICY = """[zones.wp]
size = "64k"
algorithm = "gcra"
rate = "RATE"
[[limit]]
class = "*"
zone = "wp"
key = "header:X-Key"
burst = 5
nodelay = true
status = 503
"""


def test_reload_rates(module, env=None):
    """A changed rate against stock limit_req, side by side: lowered, then raised."""
    targets = ("/stock", "/directive", "/policy")
    ngx = Nginx(module, RATE_HTTP.replace("RATE", "6r/m"), workers=2, env=env,
                files={"p.toml": RATE_POLICY.replace("RATE", "6r/m"), "html/f": "x"})

    def compare(what, n, want):
        got = {t: [request(ngx.port, "GET", t, [("X-Key", "a")])[0] for _ in range(n)]
               for t in targets}
        check(got["/stock"] == want, f"{what}: stock limit_req answered {got['/stock']}")
        check(all(g == got["/stock"] for g in got.values()), f"{what}: {got}")

    def reload(rate):
        ngx.write_conf(RATE_HTTP.replace("RATE", rate))
        with open(ngx.path("p.toml"), "w") as f:
            f.write(RATE_POLICY.replace("RATE", rate))
        ngx.reload()

    try:
        ngx.start()
        compare("6r/m burst=5", 7, [200] * 6 + [503])
        # Lowered: the excess of 6 requests now takes a minute each to drain.
        reload("1r/m")
        compare("after lowering to 1r/m", 1, [503])
        # Raised: the same excess drains in 60 ms.
        reload("100r/s")
        time.sleep(1)
        compare("a second after raising to 100r/s", 1, [200])
        # weir_req_zone's rate change is the engine's (as for policy zones): each key keeps its
        # excess silently; the master's "the rate changed" notice went with the C zone code.
        check("the rate changed" not in ngx.error_log(), "a rate notice is still logged")
        ngx.check_log()
        return "weir_req and policy zones answer like limit_req after lowering and raising a rate"
    finally:
        ngx.cleanup()

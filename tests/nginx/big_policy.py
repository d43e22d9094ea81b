"""Big policies through real nginx (run by run.py: big-policy): a policy of the most limits
`weir check` accepts passes nginx -t and serves, without touching its counters' pages up front;
one limit more is refused by both at the same file:line:col."""

import os
import re
import subprocess
import tempfile

import run
from run import Nginx, check, get_body, request, rss_kb

HTTP = """
    weir_policy %DIR%/policy.toml;
    server {
        listen 127.0.0.1:%PORT%;
        location = /metrics { weir_status; }
        location / { weir on; return 204; }
    }
"""

ZONE = '[zones.z]\nsize = "1m"\nalgorithm = "gcra"\nrate = "10r/s"\n'


def policy(n):
    """A zone and n limits on every request (4 lines, then 5 a limit)."""
    limits = ''.join(f'[[limit]]\nname = "l{i}"\nclass = "*"\nzone = "z"\nburst = 100\n'
                     for i in range(n))
    return ZONE + limits


def weir_check(weir, text):
    with tempfile.TemporaryDirectory(prefix="weir-big-") as d:
        path = os.path.join(d, "policy.toml")
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([weir, "check", path], capture_output=True, text=True, timeout=300)
        return p.returncode, p.stderr.replace(path, "policy.toml")


def nginx_t(ngx):
    """nginx -t: (exit code, output, peak RSS in KiB)."""
    p = subprocess.Popen([run.NGINX, "-p", ngx.dir + "/", "-c", ngx.path("nginx.conf"), "-t"],
                         env=ngx.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out, usage.ru_maxrss


def test_big_policy(module, weir):
    # The most limits, as weir check states it for a policy of far more.
    rc, err = weir_check(weir, policy(1 << 16))
    m = re.search(r"the policy has more than (\d+) limits", err)
    check(rc != 0 and m, f"weir check on {1 << 16} limits:\n{err[:2000]}")
    most = int(m.group(1))

    rc, err = weir_check(weir, policy(most))
    check(rc == 0, f"weir check refused {most} limits:\n{err[:2000]}")
    budget_kb = 128 << 10
    ngx = Nginx(module, HTTP, workers=2, files={"policy.toml": policy(most)})
    try:
        rc, out, peak = nginx_t(ngx)
        check(rc == 0, f"nginx -t refused {most} limits:\n{out[-2000:]}")
        check(peak < budget_kb, f"nginx -t with {most} limits peaked at {peak >> 10} MiB")
        ngx.start()
        got = [request(ngx.port, "GET", f"/{i}")[0] for i in range(20)]
        check(got == [204] * 20, f"requests under {most} limits: {got}")
        for pid in [ngx.pid] + ngx.workers_pids():
            check(rss_kb(pid) < budget_kb, f"process {pid} holds {rss_kb(pid) >> 10} MiB")
        # (reading the status reads every limit's history and top keys: docs/POLICY.md)
        status, body = get_body(ngx.port, "/metrics")
        check(status == 200 and f'limit="l{most - 1}"' in body,
              f"the status lists the last limit: {status}")
        ngx.check_log()
    finally:
        ngx.cleanup()

    # One more: both refuse it at the first limit too many.
    line = 4 + 5 * most + 1
    rc, err = weir_check(weir, policy(most + 1))
    want = f"policy.toml:{line}:1: error: the policy has more than {most} limits"
    check(rc != 0 and want in err, f"weir check on {most + 1} limits:\n{err[:2000]}")
    ngx = Nginx(module, HTTP, files={"policy.toml": policy(most + 1)})
    try:
        rc, out, _ = nginx_t(ngx)
        want = rf"policy\.toml:{line}:1: the policy has more than {most} limits"
        check(rc != 0 and re.search(want, out), f"nginx -t on {most + 1} limits:\n{out[-2000:]}")
    finally:
        ngx.cleanup()
    return (f"{most} limits pass weir check and nginx -t (peak {peak >> 10} MiB) and serve; "
            f"{most + 1} are refused by both at policy.toml:{line}:1")

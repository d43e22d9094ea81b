"""The host conformance scenarios (tests/hosts/*.toml) through a real nginx (run by run.py).

One nginx per scenario, built with the test hooks: `weir on` in front of run.Backend over TCP
and a unix socket, weir_status at /metrics (write=on: key steps too). A step's forced failure is
the hook's peer that is no address; metrics go through promcheck (a strict Prometheus parser) before their values are
read; rejection log entries are the error log's "limiting requests" lines.
"""

import glob
import json
import os
import re
import signal
import socket
import subprocess
import time
import tomllib
import urllib.parse

from run import Backend, Failure, Nginx, check, get_body, hdr, read_response, send

HOST = "nginx"
QUIET_S = 0.1  # how long a queued request must stay unanswered

HTTP = """
    weir_policy %DIR%/policy.toml;
    HOOKS
    server {
        listen 127.0.0.1:%PORT%;
        listen unix:%DIR%/s.sock;
        location = /metrics { weir_status write=on; }
        location / {
            weir on;
            proxy_read_timeout 60s;
            proxy_pass http://127.0.0.1:BACKEND;
        }
    }
"""


def load(directory):
    files = sorted(glob.glob(os.path.join(directory, "*.toml")))
    check(len(files) >= 8, f"only {len(files)} scenarios in {directory}")
    out = []
    for path in files:
        with open(path, "rb") as f:
            out.append((os.path.basename(path)[:-5], tomllib.load(f)))
    return out


def open_request(ngx, step, tag):
    """Sends the step's GET over TCP or the unix socket; the socket."""
    hs = [tuple(h) for h in step.get("headers", [])]
    if step.get("fail"):
        hs.append(("X-Weir-Test-Peer", "not-an-address"))
    if tag:
        hs.append(("X-Weir-Step", tag))
    if step.get("via") == "unix":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(ngx.path("s.sock"))
        lines = [f"GET {step['request']} HTTP/1.1", "Host: localhost", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in hs]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        return s
    return send(ngx.port, "GET", step["request"], hs)


def settle(sock, backend, tag, wait):
    """'admitted' once the backend holds the request, (status, headers) once answered, or
    None after `wait` seconds of neither."""
    deadline = time.time() + wait
    while time.time() < deadline:
        if backend.seen(tag) is not None:
            return "admitted"
        sock.settimeout(0.005)
        try:
            if sock.recv(1, socket.MSG_PEEK):
                return read_response(sock)
        except socket.timeout:
            continue
        except OSError:
            return None
    return None


def check_response(where, got, expect):
    status, headers = got
    check(status == expect["status"], f"{where}: status {status}, want {expect['status']}")
    for k, want in expect.get("headers", {}).items():
        check(hdr(headers, k) == want, f"{where}: {k}: {hdr(headers, k)!r}, want {want!r}")
    for k in expect.get("absent", []):
        check(hdr(headers, k) is None, f"{where}: unexpected {k}: {hdr(headers, k)!r}")


def limit_counts(ngx, promcheck):
    """{(limit, verdict): value} from weir_status, once promcheck accepts the text."""
    status, text = get_body(ngx.port, "/metrics")
    check(status == 200, f"weir_status answered {status}")
    p = subprocess.run([promcheck], input=text, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"weir_status is not valid Prometheus text: {p.stderr.strip()}")
    out = {}
    for m in re.finditer(r'^weir_limit_requests_total\{limit="([^"]+)",verdict="(\w+)"\} (\d+)$',
                         text, re.M):
        out[(m.group(1), m.group(2))] = int(m.group(3))
    return out


def check_status(ngx, where, want):
    """A `status` step: the JSON status's top keys (last minute) and bans of one limit, as
    sets."""
    status, text = get_body(ngx.port, "/metrics?format=json")
    check(status == 200, f"weir_status?format=json answered {status}")
    lims = {lim["name"]: lim for lim in json.loads(text)["limits"]}
    lim = lims.get(want["limit"])
    check(lim is not None, f"{where}: no limit {want['limit']} in {list(lims)}")
    if "top_keys" in want:
        got = sorted(k["key"] for k in lim["last_1m"]["keys"])
        check(got == sorted(want["top_keys"]), f"{where}: top keys {got}, want {want['top_keys']}")
    if "bans" in want:
        got = sorted(b["key"] for b in lim.get("bans") or [])
        check(got == sorted(want["bans"]), f"{where}: bans {got}, want {want['bans']}")


def rejections(ngx):
    """The error log's rejection entries: [{limit, level, client[, dry_run]}]."""
    out = []
    for m in re.finditer(r'\[(\w+)\] .*limiting requests(, dry run,)? by weir limit "([^"]+)", '
                         r'client: ([^,]+)', ngx.error_log()):
        e = {"level": m.group(1), "limit": m.group(3), "client": m.group(4)}
        if m.group(2):
            e["dry_run"] = True
        out.append(e)
    return out


def key_op(ngx, key):
    """A key step's request to weir_status: (status, JSON answer)."""
    q = urllib.parse.urlencode({"limit": key["limit"], "key": key["key"]})
    action = key.get("action", "inspect")
    method = "GET" if action == "inspect" else "POST"
    headers = [("Content-Length", "0")]
    if method == "POST":
        q += f"&action={action}"
        headers.append(("Weir-Key-Action", action))
    status, body = get_body(ngx.port, f"/metrics?{q}", method, headers)
    return status, json.loads(body)


def check_key(where, got, expect):
    """The status, then each expected field of the answer: exact, or at least `NAME_min`."""
    status, answer = got
    check(status == expect["status"], f"{where}: status {status}, want {expect['status']}: {answer}")
    if status != 200:
        check(answer.get("error"), f"{where}: no error message: {answer}")
    for k, want in expect.items():
        if k == "status":
            continue
        if k.endswith("_min"):
            v = answer.get(k[:-4])
            check(isinstance(v, int) and v >= want, f"{where}: {k[:-4]} {v}, want >= {want}")
        else:
            check(answer.get(k) == want, f"{where}: {k} {answer.get(k)!r}, want {want!r}")


def write_policy(ngx, text):
    with open(ngx.path("policy.toml"), "w") as f:
        f.write(text)


def reload(ngx, text, refused):
    write_policy(ngx, text)
    if not refused:
        ngx.reload()
        return
    workers = ngx.workers_pids()
    before = ngx.error_log().count("[emerg]")
    os.kill(ngx.pid, signal.SIGHUP)
    for _ in range(500):
        if ngx.error_log().count("[emerg]") > before:
            break
        time.sleep(0.01)
    else:
        raise Failure("a policy that does not compile was not refused")
    check(ngx.workers_pids() == workers, "a refused reload replaced the workers")


def run_scenario(module, name, sc, backend, promcheck, env):
    # The peer hook only where a step needs it: with the hooks on, delays are not served.
    fails = any(step.get("fail") for step in sc["step"])
    hooks = "weir_test_clock $http_x_weir_test_now $http_x_weir_test_peer;" if fails else ""
    http = HTTP.replace("BACKEND", str(backend.port)).replace("HOOKS", hooks)
    ngx = Nginx(module, http, env=env,
                files={"policy.toml": sc["policy"]})
    held = {}  # hold name -> socket
    try:
        ngx.start()
        for i, step in enumerate(sc["step"]):
            where = f"{name} step {i}"
            expect = step.get("expect", {})
            if HOST in step.get("skip", {}):
                continue
            if "request" in step:
                tag = f"{name}:{step['hold']}" if "hold" in step else None
                sent = time.monotonic()
                sock = open_request(ngx, step, tag)
                if tag is None:
                    check_response(where, read_response(sock), expect)
                    took = (time.monotonic() - sent) * 1000
                    check(took >= expect.get("min_ms", 0), f"{where}: answered after {took:.0f} ms")
                    continue
                held[step["hold"]] = sock
                got = settle(sock, backend, tag, QUIET_S if expect.get("queued") else 5)
                if expect.get("queued"):
                    check(got is None, f"{where}: expected queued, got {got}")
                elif got == "admitted":
                    check(expect["status"] == 200, f"{where}: admitted, want {expect['status']}")
                else:
                    check(got is not None, f"{where}: no answer")
                    check_response(where, got, expect)
            elif "finish" in step:
                tag = f"{name}:{step['finish']}"
                sock = held.pop(step["finish"])
                got = settle(sock, backend, tag, 10)
                if got == "admitted":
                    backend.event(tag).set()
                    got = read_response(sock)
                check(got is not None, f"{where}: no answer")
                check_response(where, got, expect)
            elif "leave" in step:
                held.pop(step["leave"]).close()
                time.sleep(step.get("after_ms", 0) / 1000)
            elif "reload" in step:
                which = step["reload"]
                text = sc["policy"] if which == "policy" else sc["policies"][which]
                reload(ngx, text, step.get("refused", False))
            elif "metrics" in step:
                counts = limit_counts(ngx, promcheck)
                for limit, verdicts in step["metrics"].items():
                    for verdict, want in verdicts.items():
                        got = counts.get((limit, verdict))
                        check(got == want, f"{where}: weir_limit_requests_total{{limit=\"{limit}\","
                              f"verdict=\"{verdict}\"}} {got}, want {want}")
            elif "status" in step:
                check_status(ngx, where, step["status"])
            elif "key" in step:
                check_key(where, key_op(ngx, step["key"]), expect)
            elif "log" in step:
                got = rejections(ngx)
                check(got == step["log"], f"{where}: rejections logged {got}, want {step['log']}")
            else:
                raise Failure(f"{where}: no request, finish, leave, reload, metrics, status, key "
                              "or log")
        for tag_sock in held.values():
            tag_sock.close()
        ngx.check_log(allow=[r"test hooks are enabled", r"weir_engine_evaluate\(\) failed",
                             r"weir policy"])
    finally:
        ngx.cleanup()


def test_hosts(module, scenarios, promcheck, env=None):
    backend = Backend()
    ran, skipped, failed = 0, [], []
    try:
        for name, sc in load(scenarios):
            if HOST in sc.get("skip", {}):
                skipped.append(f"{name} ({sc['skip'][HOST]})")
                continue
            try:
                run_scenario(module, name, sc, backend, promcheck, env)
                ran += 1
            except (Failure, OSError, KeyError) as e:
                failed.append(f"{name}: {e}")
    finally:
        for ev in backend.release.values():
            ev.set()
        backend.server.shutdown()
    check(not failed, f"{len(failed)} scenario(s) failed:\n" + "\n".join(failed))
    return f"{ran} scenarios passed" + (f", skipped: {'; '.join(skipped)}" if skipped else "")

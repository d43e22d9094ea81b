"""The programs of a run: the backend and the front ends in front of it, each a real process on
127.0.0.1 high ports with its pid file in a temporary directory, stopped by pid.

Front ends:
  none          the clients talk to the backend directly
  nginx-fixed   nginx + weir's module, policy mode, a concurrency limit with a hand-set `max`
  nginx-auto    the same with `max = "auto"` (the limit learned from backend latency)
  caddy-fixed / caddy-auto   Caddy with the weir plugin and reverse_proxy (when built)
  tower-fixed / tower-auto   tower/examples/overload_proxy (when built)

The policy (`policy_text`) uses what the weir build accepts: lanes and `reserve` when it has
them (health checks critical, /w/Special:* sheddable, /api/critical/* critical), else the health
checks are exempt, as a policy without lanes would do it.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")


class StartError(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def alive(pid):
    """True while pid runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# every process started here that has not been stopped yet, and every one ever started
# (nginx's workers included once known)
STARTED = set()
EVER = []


def started(pid):
    STARTED.add(pid)
    EVER.append(pid)


def children(pid):
    """The pids of pid's children (nginx's workers)."""
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def left_running():
    """Processes this module started that still run."""
    return [pid for pid in EVER if alive(pid)]


def stop_all():
    """Stops whatever is still running (an interrupted run)."""
    for pid in list(STARTED):
        stop_pid(pid, grace=2.0)


def stop_pid(pid, grace=5.0):
    """SIGTERM, then SIGKILL after `grace` seconds."""
    if not pid:
        return
    STARTED.discard(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.time() + grace
    while time.time() < end:
        if not alive(pid):
            return
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def read_pid(path, wait=10.0):
    end = time.time() + wait
    while time.time() < end:
        try:
            with open(path) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            time.sleep(0.02)
    raise StartError(f"no pid file {path}")


def wait_listening(port, proc=None, wait=20.0, log=None):
    end = time.time() + wait
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise StartError(f"exited with {proc.returncode}: {tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise StartError(f"nothing listens on {port} after {wait:.0f}s: {tail(log)}")


def tail(path, n=1500):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except (OSError, TypeError):
        return ""


class Backend:
    """backend.py as its own process."""

    def __init__(self, workdir, slots, service_ms, jitter=0.1):
        self.dir = workdir
        self.port = free_port()
        self.pid_file = os.path.join(workdir, "backend.pid")
        self.log = os.path.join(workdir, "backend.log")
        args = [sys.executable, os.path.join(HERE, "backend.py"), "--port", str(self.port),
                "--slots", str(slots), "--service-ms", str(service_ms), "--jitter", str(jitter),
                "--pid-file", self.pid_file]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        started(self.pid)
        wait_listening(self.port, self.proc, log=self.log)
        read_pid(self.pid_file)

    def stop(self):
        stop_pid(self.pid)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


# ---- policies -------------------------------------------------------------------------------

PROBE_AUTO = """[zones.b]
size = "64k"
algorithm = "concurrency"
max = "auto"
bounds = [2, 400]
[[limit]]
name = "b"
class = "*"
zone = "b"
key = "global"
"""

PROBE_LANES = """[zones.b]
size = "64k"
algorithm = "concurrency"
max = 10
reserve = 2
[classes.health]
match = [{ path = "/healthz" }]
lane = "critical"
[[limit]]
name = "b"
class = "*"
zone = "b"
key = "global"
"""


def policy_text(limit, lanes, queue, queue_timeout_s, bounds=None):
    """The policy of a weir front end: one concurrency limit named `backend` over everything,
    `max` = limit (a number, or "auto")."""
    zone = ["[zones.backend]", 'size = "1m"', 'algorithm = "concurrency"']
    zone.append('max = "auto"' if limit == "auto" else f"max = {int(limit)}")
    if limit == "auto" and bounds:
        zone.append(f"bounds = [{bounds[0]}, {bounds[1]}]")
    if lanes:
        zone.append("reserve = 2")
    out = zone + [""]
    if lanes:
        out += ["[classes.health]", 'match = [{ path = "/healthz" }]', 'lane = "critical"', "",
                "[classes.critical]", 'match = [{ path_prefix = "/api/critical/" }]',
                'lane = "critical"', "",
                "[classes.tools]", 'match = [{ path_iglob = "/w/Special:*" }]',
                'lane = "sheddable"', ""]
    else:
        out += ["[exempt.health]", 'match = [{ path = "/healthz" }]', ""]
    out += ["[[limit]]", 'name = "backend"', 'class = "*"', 'zone = "backend"', 'key = "global"',
            'log_level = "info"']
    if queue:
        out += [f"queue = {queue}", f'timeout = "{int(queue_timeout_s * 1000)}ms"']
    return "\n".join(out) + "\n"


# ---- nginx ----------------------------------------------------------------------------------

NGINX_CONF = """{load}
{user}
worker_processes {workers};
worker_rlimit_nofile 20000;
error_log {dir}/logs/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 16000; accept_mutex off; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    weir_policy {dir}/policy.toml;
    upstream app {{
        server 127.0.0.1:{backend};
        keepalive 512;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        keepalive_requests 1000000;
        location = /_weir {{ weir off; weir_status; }}
        location / {{
            weir on;
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout 5s;
            proxy_read_timeout 120s;
        }}
    }}
}}
"""


class Nginx:
    """nginx (daemon; its pid file) with the weir module in policy mode."""

    def __init__(self, module, backend_port, policy, workers=1):
        self.module = os.path.abspath(module)
        self.dir = tempfile.mkdtemp(prefix="weir-overload-nginx-")
        os.chmod(self.dir, 0o755)
        for sub in ("tmp", "logs"):
            os.makedirs(os.path.join(self.dir, sub))
        self.port = free_port()
        self.pid = None
        with open(os.path.join(self.dir, "policy.toml"), "w") as f:
            f.write(policy)
        user = "user root;" if os.geteuid() == 0 else ""
        with open(os.path.join(self.dir, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF.format(load=f"load_module {self.module};", user=user,
                                      workers=workers, dir=self.dir, backend=backend_port,
                                      port=self.port))
        self.status_url = f"http://127.0.0.1:{self.port}/_weir?format=json"

    def nginx(self, *args):
        return subprocess.run([NGINX, "-p", self.dir + "/", "-c",
                               os.path.join(self.dir, "nginx.conf"), *args],
                              capture_output=True, text=True, timeout=60)

    def start(self):
        p = self.nginx()
        if p.returncode != 0:
            raise StartError(f"nginx did not start: {p.stderr.strip()}")
        self.pid = read_pid(os.path.join(self.dir, "nginx.pid"))
        started(self.pid)
        wait_listening(self.port, log=os.path.join(self.dir, "logs", "error.log"))
        EVER.extend(children(self.pid))
        return self

    def error_log(self):
        return tail(os.path.join(self.dir, "logs", "error.log"), 4000)

    def stop(self):
        workers = children(self.pid) if self.pid else []
        stop_pid(self.pid)
        for pid in workers:
            stop_pid(pid, grace=2.0)
        self.pid = None


def nginx_accepts(module, policy):
    """True when `nginx -t` with the module loads `policy`."""
    ngx = Nginx(module, 1, policy)
    try:
        return ngx.nginx("-t").returncode == 0
    finally:
        subprocess.run(["rm", "-rf", ngx.dir])


# ---- Caddy ----------------------------------------------------------------------------------

CADDYFILE = """{{
	admin 127.0.0.1:{admin}
	default_bind 127.0.0.1
	auto_https off
	persist_config off
	grace_period 1s
}}
:{port} {{
	weir {{
		policy {dir}/policy.toml
	}}
	reverse_proxy 127.0.0.1:{backend} {{
		transport http {{
			keepalive 60s
			keepalive_idle_conns 512
		}}
	}}
}}
:{status} {{
	weir_status /weir_status
}}
"""


class Caddy:
    """Caddy with the weir plugin (`caddy run`, its --pidfile); JSON status on the admin API,
    and the status (the page too) in a site of its own on port `status` (weir_status)."""

    def __init__(self, binary, backend_port, policy):
        self.binary = os.path.abspath(binary)
        self.dir = tempfile.mkdtemp(prefix="weir-overload-caddy-")
        self.port, self.admin, self.status = free_port(), free_port(), free_port()
        self.pid = None
        self.proc = None
        with open(os.path.join(self.dir, "policy.toml"), "w") as f:
            f.write(policy)
        with open(os.path.join(self.dir, "Caddyfile"), "w") as f:
            f.write(CADDYFILE.format(admin=self.admin, port=self.port, dir=self.dir,
                                     backend=backend_port, status=self.status))
        self.status_url = f"http://127.0.0.1:{self.admin}/weir/status"
        self.log = os.path.join(self.dir, "caddy.log")

    def start(self):
        env = dict(os.environ, HOME=self.dir, XDG_DATA_HOME=self.dir, XDG_CONFIG_HOME=self.dir)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [self.binary, "run", "--adapter", "caddyfile", "--config",
                 os.path.join(self.dir, "Caddyfile"), "--pidfile",
                 os.path.join(self.dir, "caddy.pid")],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env, cwd=self.dir)
        self.pid = self.proc.pid
        started(self.pid)
        wait_listening(self.port, self.proc, log=self.log)
        return self

    def error_log(self):
        return tail(self.log, 4000)

    def stop(self):
        stop_pid(self.pid)
        if self.proc:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.pid = None


# ---- tower ----------------------------------------------------------------------------------


class Tower:
    """tower/examples/overload_proxy: an axum reverse proxy behind the weir layer."""

    def __init__(self, binary, backend_port, policy):
        self.binary = os.path.abspath(binary)
        self.dir = tempfile.mkdtemp(prefix="weir-overload-tower-")
        self.port = free_port()
        self.pid = None
        self.proc = None
        with open(os.path.join(self.dir, "policy.toml"), "w") as f:
            f.write(policy)
        self.args = [self.binary, os.path.join(self.dir, "policy.toml"),
                     f"127.0.0.1:{self.port}", f"127.0.0.1:{backend_port}"]
        self.status_url = f"http://127.0.0.1:{self.port}/_weir?format=json"
        self.log = os.path.join(self.dir, "tower.log")

    def start(self):
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, cwd=self.dir)
        self.pid = self.proc.pid
        started(self.pid)
        with open(os.path.join(self.dir, "tower.pid"), "w") as f:
            f.write(f"{self.pid}\n")
        wait_listening(self.port, self.proc, log=self.log)
        return self

    def error_log(self):
        return tail(self.log, 4000)

    def stop(self):
        stop_pid(self.pid)
        if self.proc:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.pid = None


class Direct:
    """No front end: the clients talk to the backend."""

    status_url = None
    pid = None

    def __init__(self, backend_port):
        self.port = backend_port

    def start(self):
        return self

    def error_log(self):
        return ""

    def stop(self):
        pass


# ---- status ---------------------------------------------------------------------------------


def read_capacity(url, timeout=0.5):
    """The `backend` limit's capacity object from a JSON status ({} without the feature, None
    when the status could not be read)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            status = json.loads(r.read())
    except (OSError, ValueError):
        return None
    for lim in status.get("limits") or []:
        if lim.get("name") == "backend":
            cap = dict(lim.get("capacity") or {})
            cap["rejected"] = lim.get("rejected", 0)
            cap["queued_total"] = lim.get("queued", 0)
            cap["passed"] = lim.get("passed", 0)
            return cap
    return {}

#!/usr/bin/env bash
# End-to-end cost of weir in nginx, measured with wrk: requests/s for a static
# 1-byte file with no limit, stock limit_req, weir_req, policy mode with one limit and
# with three (per IP, a global class that does not match, per path), each with one hot
# key and with a new key on every request (wrk -s: unique URIs, key = $request_uri / the
# normalized path).  In these sets nothing is ever rejected: the limits are set far above the
# load, so the figures are the bookkeeping cost. The `flood` set is the reverse: one hot key
# at 1r/m, no burst, so every request after the first is refused (stock limit_req and
# weir_req with 503, policy mode with 429); its plain row answers `return 503`.
#
#   benches/nginx_wrk.sh [MODULE.so]      (make nginx-module first; needs wrk)
#
# With INSTR=1 it counts instructions instead (needs valgrind; load-independent): each
# configuration runs in one nginx process under callgrind, sent N1 and then N2 requests on one
# keep-alive connection; the figure is the nginx process's user-space instructions per
# request, (I(N2) - I(N1)) / (N2 - N1). The kernel's share (TCP, the file) is not in it, so
# the relative cost of a limit is larger here than in requests/s. Env: N1 (200), N2 (1200);
# TSV=FILE also writes "nginx/SET/CONFIG<TAB>instructions" lines to FILE.
#
# Each configuration runs ROUNDS times, the rounds interleaved (plain, stock, weir_req,
# policy, plain, …) so that load from other jobs on the machine hits all of them alike; the
# table gives the median requests/s and the median worker CPU time per request (utime+stime
# of the nginx workers from /proc, divided by the requests wrk completed), which is much less
# sensitive to other jobs than throughput, and the user-space part of it alone (utime): the
# kernel's TCP work is about three quarters of a worker's time here and varies from run to
# run by more than a module costs, while a module runs in user space.
#
# Env: DURATION (default 5s), ROUNDS (3), CONNS (32), THREADS (2), WORKERS (1),
# SETS ("hot churn flood").
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
module=$(realpath "${1:-$here/target/nginx/ngx_http_weir_module.so}")
duration=${DURATION:-5s}
rounds=${ROUNDS:-3}
[ -n "${INSTR:-}" ] && rounds=1 # exact: one round
conns=${CONNS:-32}
threads=${THREADS:-2}
workers=${WORKERS:-1}
if [ -n "${INSTR:-}" ]; then
    command -v valgrind >/dev/null || { echo "valgrind missing: apt-get install valgrind" >&2; exit 1; }
else
    command -v wrk >/dev/null || { echo "wrk missing: apt-get install wrk" >&2; exit 1; }
fi
[ -f "$module" ] || { echo "$module missing: make nginx-module" >&2; exit 1; }

dir=$(mktemp -d)
chmod 755 "$dir"
mkdir -p "$dir/html" "$dir/tmp"
printf x > "$dir/html/f"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pid=

stop() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 100); do
            if [ -d "/proc/$pid" ] && grep -qv '^Z' <(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null); then
                sleep 0.05
            else
                break
            fi
        done
        pid=
    fi
}
trap 'stop; rm -rf "$dir"' EXIT

cat > "$dir/churn.lua" <<'LUA'
local n = 0
request = function()
    n = n + 1
    return wrk.format("GET", "/k" .. n .. "-" .. math.random(1, 1000000000))
end
LUA

policy() { # $1 = key, $2 = rate (1000000r/s), $3 = burst (1000000)
    cat > "$dir/policy.toml" <<TOML
[zones.z]
size = "64m"
algorithm = "gcra"
rate = "${2:-1000000r/s}"
[[limit]]
class = "*"
zone = "z"
key = "$1"
burst = ${3:-1000000}
nodelay = true
TOML
}

policy3() { # the issue's three limits: per IP, a global tool class, per path
    cat > "$dir/policy3.toml" <<TOML
[zones.ip]
size = "64m"
algorithm = "gcra"
rate = "1000000r/s"
[zones.tools]
size = "64k"
algorithm = "gcra"
rate = "1000000r/s"
[zones.path]
size = "64m"
algorithm = "gcra"
rate = "1000000r/s"
[classes.tools]
match = [{ path = ["/w/Special:*", "/index.php"] }, { query.title = { iglob = "special:*" } }]
[[limit]]
name = "per-ip"
class = "*"
zone = "ip"
burst = 1000000
nodelay = true
[[limit]]
name = "tools"
class = "tools"
zone = "tools"
key = "global"
burst = 1000000
nodelay = true
[[limit]]
name = "per-path"
class = "*"
zone = "path"
key = "path"
burst = 1000000
nodelay = true
TOML
}

run() { # $1 = label, $2 = http block body, $3 = wrk script or ""
    cat > "$dir/nginx.conf" <<CONF
load_module $module;
user root;
worker_processes $workers;
error_log $dir/error.log warn;
pid $dir/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp;
    uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;
    limit_req_zone \$server_name zone=stock_hot:64m rate=1000000r/s;
    limit_req_zone \$request_uri zone=stock_churn:64m rate=1000000r/s;
    weir_req_zone \$server_name zone=weir_hot:64m rate=1000000r/s;
    weir_req_zone \$request_uri zone=weir_churn:64m rate=1000000r/s;
    limit_req_zone \$server_name zone=stock_flood:64m rate=1r/m;
    weir_req_zone \$server_name zone=weir_flood:64m rate=1r/m;
    $2
    server {
        listen 127.0.0.1:$port;
        server_name bench; # the hot key (\$server_name): an empty key is never limited
        root $dir/html;
        location / {
            $3
            try_files /f =404;
        }
    }
}
CONF
    if [ -n "${INSTR:-}" ]; then
        instr "$@"
        return
    fi
    /usr/sbin/nginx -p "$dir/" -c "$dir/nginx.conf"
    sleep 0.3
    pid=$(cat "$dir/nginx.pid")
    local script=() t0 t1 reqs
    [ "$4" = churn ] && script=(-s "$dir/churn.lua")
    read -r t0 u0 <<<"$(worker_ticks)"
    wrk -t"$threads" -c"$conns" -d"$duration" "${script[@]}" "http://127.0.0.1:$port/f" > "$dir/wrk.out"
    read -r t1 u1 <<<"$(worker_ticks)"
    stop
    if [ "$4" = flood ]; then
        grep -q Non-2xx "$dir/wrk.out" || { echo "$1 $4: nothing refused" >&2; exit 1; }
    elif grep -q Non-2xx "$dir/wrk.out"; then
        echo "$1 $4: non-2xx responses (a limit rejected):" >&2
        cat "$dir/wrk.out" >&2
        exit 1
    fi
    reqs=$(awk '/requests in/ {print $1}' "$dir/wrk.out")
    echo "$1|$4|$(awk '/Requests\/sec/ {print $2}' "$dir/wrk.out")|$(( (t1 - t0) * 100000000 / $(getconf CLK_TCK) / reqs ))|$(( (u1 - u0) * 100000000 / $(getconf CLK_TCK) / reqs ))" >> "$dir/results"
}

instr() { # as run, under callgrind: instructions per request, in the CPU column (×100)
    local n total=() i
    for n in "${N1:-200}" "${N2:-1200}"; do
        valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" /usr/sbin/nginx -p "$dir/" \
            -c "$dir/nginx.conf" -g "daemon off; master_process off;" 2> "$dir/vg.err" &
        pid=$!
        python3 - "$port" "$n" "$4" "$1" <<'PY'
import http.client, sys, time
port, n, keys, label = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
for _ in range(600):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.connect()
        break
    except OSError:
        time.sleep(0.1)
for i in range(n):
    c.request("GET", f"/k{i}" if keys == "churn" else "/f")
    r = c.getresponse()
    r.read()
    if keys == "flood":
        if i > 0 and r.status < 400:
            sys.exit(f"{label} {keys}: request {i} answered {r.status}, not refused")
    elif r.status != 200:
        sys.exit(f"{label} {keys}: status {r.status}: a limit rejected")
PY
        kill -QUIT "$pid"
        wait "$pid" || true
        pid=
        total+=("$(sed -n 's/^summary: *//p' "$dir/cg.out")")
    done
    i=$(( (total[1] - total[0]) / (${N2:-1200} - ${N1:-200}) ))
    echo "$1|$4|0|$(( i * 100 ))|0" >> "$dir/results"
}

worker_ticks() { # utime + stime, and utime alone, of the workers, in clock ticks
    local sum=0 user=0 w
    for w in $(ps -o pid= --ppid "$pid"); do
        sum=$(( sum + $(awk '{print $14 + $15}' "/proc/$w/stat") ))
        user=$(( user + $(awk '{print $14}' "/proc/$w/stat") ))
    done
    echo "$sum $user"
}

for _ in $(seq "$rounds"); do
    for keys in ${SETS:-hot churn flood}; do
        if [ "$keys" = flood ]; then
            run "plain (return 503)" "" "return 503;" flood
            run "stock limit_req" "" "limit_req zone=stock_flood;" flood
            run "weir_req" "" "weir_req zone=weir_flood;" flood
            policy global 1r/m 0
            run "weir policy mode" "weir_policy $dir/policy.toml;" "weir on;" flood
            continue
        fi
        run "plain (no limit)" "" "" "$keys"
        run "stock limit_req" "" "limit_req zone=stock_$keys burst=1000000 nodelay;" "$keys"
        run "weir_req" "" "weir_req zone=weir_$keys burst=1000000 nodelay;" "$keys"
        if [ "$keys" = hot ]; then policy global; else policy path; fi
        run "weir policy mode" "weir_policy $dir/policy.toml;" "weir on;" "$keys"
        policy3
        run "weir policy, 3 limits" "weir_policy $dir/policy3.toml;" "weir on;" "$keys"
    done
done

python3 - "$dir/results" <<'PY'
import os, sys, statistics, collections
instr = bool(os.environ.get("INSTR"))
slug = {"plain (no limit)": "plain", "plain (return 503)": "plain", "stock limit_req": "limit_req",
        "weir_req": "weir_req", "weir policy mode": "policy1", "weir policy, 3 limits": "policy3"}
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    name, keys, rps, cpu, user = line.strip().split("|")
    rows.setdefault((keys, name), []).append((float(rps), int(cpu) / 100, int(user) / 100))
cost = "instructions/req" if instr else "worker CPU us/req"
user_col = "" if instr else f" {'user us/req':>12} {'vs plain':>9}"
print(f"{'configuration':<22} {'keys':<6} {'req/s (median)':>15} {'vs plain':>9} {cost:>18} {'vs plain':>9}{user_col}")
for keys in dict.fromkeys(k for k, _ in rows):
    base = next(v for (k, name), v in rows.items() if k == keys and name.startswith("plain"))
    b_rps = statistics.median(r for r, _, _ in base) or 1
    b_cpu = statistics.median(c for _, c, _ in base)
    b_user = statistics.median(u for _, _, u in base) or 1
    for (k, name), v in rows.items():
        if k != keys:
            continue
        rps = statistics.median(r for r, _, _ in v)
        cpu = statistics.median(c for _, c, _ in v)
        user = statistics.median(u for _, _, u in v)
        line = f"{name:<22} {keys:<6} {rps:>15.0f} {rps / b_rps:>9.2f} {cpu:>18.2f} {cpu / b_cpu:>9.2f}"
        print(line + ("" if instr else f" {user:>12.2f} {user / b_user:>9.2f}"))
        if instr and os.environ.get("TSV"):
            with open(os.environ["TSV"], "a") as f:
                f.write(f"nginx/{keys}/{slug[name]}\t{cpu:.0f}\n")
PY
if [ -n "${INSTR:-}" ]; then
    echo "(callgrind, one nginx process, requests ${N1:-200} to ${N2:-1200} on one keep-alive connection)"
else
    echo "(wrk -t$threads -c$conns -d$duration, $rounds interleaved rounds, $workers worker(s), $(nproc) cores shared with other jobs; load average $(cut -d' ' -f1-3 /proc/loadavg))"
fi

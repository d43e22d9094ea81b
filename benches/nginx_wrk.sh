#!/usr/bin/env bash
# End-to-end cost of weir in nginx, measured with wrk: requests/s for a static
# 1-byte file with no limit, stock limit_req, weir_req and policy mode, each
# with one hot key and with a new key on every request (wrk -s: unique URIs,
# key = $request_uri / the normalized path).  Nothing is ever rejected: the
# limits are set far above the load, so the figures are the bookkeeping cost.
#
#   benches/nginx_wrk.sh [MODULE.so]      (make nginx-module first; needs wrk)
#
# Env: DURATION (default 5s), CONNS (32), THREADS (2), WORKERS (1).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
module=$(realpath "${1:-$here/target/nginx/ngx_http_weir_module.so}")
duration=${DURATION:-5s}
conns=${CONNS:-32}
threads=${THREADS:-2}
workers=${WORKERS:-1}
command -v wrk >/dev/null || { echo "wrk missing: apt-get install wrk" >&2; exit 1; }
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
        for _ in $(seq 100); do [ -d "/proc/$pid" ] && grep -qv '^Z' <(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || break; sleep 0.05; done
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

policy() { # $1 = key
    cat > "$dir/policy.toml" <<TOML
[zones.z]
size = "64m"
algorithm = "gcra"
rate = "1000000r/s"
[[limit]]
class = "*"
zone = "z"
key = "$1"
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
    $2
    server {
        listen 127.0.0.1:$port;
        root $dir/html;
        location / {
            $3
            try_files /f =404;
        }
    }
}
CONF
    /usr/sbin/nginx -p "$dir/" -c "$dir/nginx.conf"
    sleep 0.3
    pid=$(cat "$dir/nginx.pid")
    local script=()
    [ "$4" = churn ] && script=(-s "$dir/churn.lua")
    wrk -t"$threads" -c"$conns" -d"$duration" "${script[@]}" "http://127.0.0.1:$port/f" > "$dir/wrk.out"
    stop
    local rps non2xx
    rps=$(awk '/Requests\/sec/ {print $2}' "$dir/wrk.out")
    non2xx=$(awk '/Non-2xx/ {print $5}' "$dir/wrk.out")
    printf '%-28s %-6s %12s  %s\n' "$1" "$4" "$rps" "${non2xx:+non-2xx: $non2xx}"
}

printf '%-28s %-6s %12s\n' "configuration" "keys" "requests/s"
for keys in hot churn; do
    run "plain (no limit)" "" "" $keys
    run "stock limit_req" "" "limit_req zone=stock_$keys burst=1000000 nodelay;" $keys
    run "weir_req" "" "weir_req zone=weir_$keys burst=1000000 nodelay;" $keys
    if [ $keys = hot ]; then policy global; else policy path; fi
    run "weir policy mode" "weir_policy $dir/policy.toml;" "weir on;" $keys
done
echo "(wrk -t$threads -c$conns -d$duration, $workers worker(s), $(nproc) cores shared with other jobs)"

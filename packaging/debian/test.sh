#!/usr/bin/env bash
# Installs the packages packaging/debian/build.sh made on this machine (root, Debian 12 with
# Debian's nginx), serves a weir-limited site through the system nginx with the stock
# /etc/nginx, then removes and purges both packages and checks nothing of them is left.
#
#   packaging/debian/test.sh DEB_DIR
#
# The stock configuration is used as installed, port 80 default site included: the system
# nginx needs ports 80 and [::]:80 free, and no system nginx may be running (the test would
# otherwise stop or reload someone's server). The test's site is one file in
# /etc/nginx/sites-enabled on a free 127.0.0.1 port. nginx's stock logs
# (/var/log/nginx/*.log) are cut back to their size before the test. Whatever fails, the exit
# trap stops the nginx it started (by pid), removes the site file and purges both packages.
set -euo pipefail

debs=$(cd "${1:?usage: $0 DEB_DIR}" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
pkgs=(libnginx-mod-http-weir weir)
link=/etc/nginx/modules-enabled/50-mod-http-weir.conf
so=/usr/lib/nginx/modules/ngx_http_weir_module.so
site=/etc/nginx/sites-enabled/weir-deb-test
pidfile=/run/nginx.pid
export DEBIAN_FRONTEND=noninteractive

fail() { echo "deb-test: FAIL: $*" >&2; exit 1; }
installed() { dpkg-query -W -f '${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }

[ "$(id -u)" = 0 ] || fail "needs root (it installs packages)"
for p in "${pkgs[@]}"; do
    ! installed "$p" || fail "$p is already installed here; the test installs and purges it"
done
[ ! -s "$pidfile" ] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null \
    || fail "a system nginx is running (pid $(cat "$pidfile")): stop it first"
python3 - <<'EOF' || fail "port 80 is in use: the stock default site could not listen"
import socket
for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
    s = socket.socket(fam)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 80))
    s.close()
EOF

declare -A logsize
for f in /var/log/nginx/access.log /var/log/nginx/error.log; do
    logsize[$f]=$( [ -f "$f" ] && stat -c %s "$f" || echo none)
done
nginx_pid=

cleanup() {
    local rc=$?
    if [ -n "$nginx_pid" ] && kill -0 "$nginx_pid" 2>/dev/null; then
        kill -QUIT "$nginx_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$nginx_pid" 2>/dev/null || true
    fi
    rm -f "$site"
    apt-get purge -y -qq "${pkgs[@]}" >/dev/null 2>&1 || true
    for f in "${!logsize[@]}"; do
        if [ "${logsize[$f]}" = none ]; then rm -f "$f"; elif [ -f "$f" ]; then truncate -s "${logsize[$f]}" "$f"; fi
    done
    [ $rc = 0 ] || echo "deb-test: failed; packages purged, nginx stopped" >&2
}
trap cleanup EXIT

# statuses PORT N: the status codes of N GETs of / in turn
statuses() {
    python3 - "$1" "$2" <<'EOF'
import sys, urllib.error, urllib.request
codes = []
for _ in range(int(sys.argv[2])):
    try:
        codes.append(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=10).status)
    except urllib.error.HTTPError as e:
        codes.append(e.code)
print(*codes)
EOF
}

apt-get install -y -qq "$debs"/libnginx-mod-http-weir_*.deb "$debs"/weir_*.deb >/dev/null
for p in "${pkgs[@]}"; do installed "$p" || fail "$p did not install"; done
[ -f "$so" ] || fail "$so missing"
[ "$(readlink "$link")" = /usr/share/nginx/modules-available/mod-http-weir.conf ] \
    || fail "postinst did not link $link"
readelf -S /usr/bin/weir | grep -q '\.symtab' && fail "/usr/bin/weir is not stripped"
/usr/bin/weir check "$here/examples/wiki.toml" >/dev/null || fail "weir check examples/wiki.toml"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$site" <<EOF
# weir deb-test (packaging/debian/test.sh); removed when the test ends
weir_req_zone \$binary_remote_addr zone=weir_deb_test:1m rate=1r/m;
server {
    listen 127.0.0.1:$port;
    location / {
        weir_req zone=weir_deb_test burst=2 nodelay;
        weir_req_status 429;
        empty_gif;  # a content handler: "return" would answer before weir_req runs
    }
}
EOF
nginx -t -q || fail "nginx -t with the stock configuration and the weir site"

/usr/sbin/nginx
nginx_pid=$(cat "$pidfile")
for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
    sleep 0.1
done
got=$(statuses "$port" 4)
# one request per minute plus a burst of 2: the fourth is limited
[ "$got" = "200 200 200 429" ] || fail "statuses $got, expected 200 200 200 429"
echo "deb-test: system nginx (pid $nginx_pid, stock /etc/nginx) on 127.0.0.1:$port: $got"
kill -QUIT "$nginx_pid"
for _ in $(seq 100); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$nginx_pid" 2>/dev/null || fail "nginx $nginx_pid did not stop"
nginx_pid=
rm -f "$site"

# remove: the link goes with the module (nginx -t must not load a missing .so); purge: the rest
apt-get remove -y -qq libnginx-mod-http-weir >/dev/null
[ ! -e "$link" ] && [ ! -L "$link" ] || fail "remove left $link"
[ ! -e "$so" ] || fail "remove left $so"
nginx -t -q || fail "nginx -t after removing the module"
# a reinstall after a remove enables the module again (an upgrade would keep the admin's choice)
apt-get install -y -qq "$debs"/libnginx-mod-http-weir_*.deb >/dev/null
[ -L "$link" ] && [ ! -L "$link.removed" ] || fail "a reinstall after remove did not relink $link"
apt-get purge -y -qq "${pkgs[@]}" >/dev/null
for p in "${pkgs[@]}"; do
    ! dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -qv '^unknown ok not-installed$' \
        || fail "dpkg still knows $p: $(dpkg-query -W -f '${Status}' "$p")"
    ! dpkg -l | awk '{print $2}' | grep -qx "$p" || fail "dpkg -l still lists $p"
done
left=$(ls /etc/nginx/modules-enabled/ | grep weir || true)
[ -z "$left" ] || fail "purge left /etc/nginx/modules-enabled/$left"
for f in "$so" /usr/share/nginx/modules-available/mod-http-weir.conf /usr/bin/weir \
    /usr/share/doc/weir /usr/share/doc/libnginx-mod-http-weir; do
    [ ! -e "$f" ] || fail "purge left $f"
done
echo "deb-test: installed, served, removed and purged both packages; nothing left"

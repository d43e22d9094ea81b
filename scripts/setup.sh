#!/usr/bin/env bash
# Installs what weir's build and tests need (nginx + nginx-dev for the nginx module) on a fresh Debian 12 machine (idempotent).
# Rust (stable, with rustfmt and clippy) is expected to be installed already (rustup).
set -euo pipefail

need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
[ -f /usr/share/nginx/src/configure ] || need+=(nginx-dev)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v ps >/dev/null 2>&1 || need+=(procps)
command -v make >/dev/null 2>&1 || need+=(make)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
[ -f /usr/include/cjson/cJSON.h ] || need+=(libcjson-dev)
# nginx's own tests (make nginx-test) load every module `nginx -V` names as dynamic.
for m in http-geoip http-image-filter http-perl http-xslt-filter mail stream stream-geoip; do
    [ -f /usr/lib/nginx/modules/ngx_${m//-/_}_module.so ] || need+=(libnginx-mod-$m)
done
command -v prove >/dev/null 2>&1 || need+=(perl)
# nginx.org releases built from source (make nginx-versions) need the PCRE2 and zlib headers;
# make deb needs dpkg-shlibdeps.
[ -f /usr/include/pcre2.h ] || need+=(libpcre2-dev)
[ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
command -v dpkg-shlibdeps >/dev/null 2>&1 || need+=(dpkg-dev)
# Cluster-scope tests (tests/cluster/cluster.rs) start their own redis-server on a free port.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# tests/cluster/topologies.rs: redis-cli builds a Redis Cluster and asks the Sentinel; openssl
# makes the TLS test's certificates.
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# fail2ban-regex checks nginx's rejection lines against fail2ban's filters (make nginx-test).
command -v fail2ban-regex >/dev/null 2>&1 || need+=(fail2ban)
# The status page in a real browser (make browser-test): headless Chromium under chromedriver,
# driven by Debian's python3 through python3-selenium.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
[ -d /usr/lib/python3/dist-packages/selenium ] || need+=(python3-selenium)
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi
# nginx and redis-server from Debian start services on install; the tests run their own.
if command -v systemctl >/dev/null 2>&1; then
    systemctl stop nginx >/dev/null 2>&1 || true
    systemctl stop redis-server >/dev/null 2>&1 || true
    systemctl stop fail2ban >/dev/null 2>&1 || true
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# The Caddy plugin (make caddy / caddy-test): Go >= 1.26 with cgo (the machine image's
# /usr/local/go; Debian's golang package is too old for Caddy v2.11), gcc and binutils (above).
# xcaddy is installed by the Makefile into target/caddy/bin; Go modules come from the proxy.
if ! command -v go >/dev/null 2>&1; then
    echo "setup: go not found: the Caddy plugin needs Go >= 1.26 (https://go.dev/dl)" >&2
    exit 1
fi
# `setup.sh arm64` (make dist-arm64): the linux/arm64 cross toolchain, and qemu-user to run
# what it builds.
if [ "${1:-}" = arm64 ]; then
    cross=()
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || cross+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
    command -v qemu-aarch64 >/dev/null 2>&1 || cross+=(qemu-user)
    if [ ${#cross[@]} -gt 0 ]; then
        echo "setup: installing ${cross[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${cross[@]}" >/dev/null ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${cross[@]}" >/dev/null; }
    fi
    rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
        rustup target add aarch64-unknown-linux-gnu
fi
echo "setup: ok"

#!/usr/bin/env bash
# Runs nginx's own limit_req / limit_conn tests (nginx-tests) against the weir
# module: each limit_req*.t / limit_conn*.t is copied with the directives and
# variables renamed (limit_req -> weir_req, limit_conn -> weir_conn) and run
# with prove against /usr/sbin/nginx (or TEST_NGINX_BINARY) with the module loaded.
#
#   nginx-module/t/run-nginx-tests.sh /path/to/nginx-tests [MODULE.so | --static]
#
# --static: weir is compiled into TEST_NGINX_BINARY (--add-module); nothing is loaded.
#
# nginx-tests is not vendored (git clone https://github.com/nginx/nginx-tests);
# `make nginx-test` runs this when a checkout is found (see NGINX_TESTS there).
# Test::Nginx loads every module `nginx -V` names as dynamic, so Debian's
# libnginx-mod-* packages must be installed (see docs/NGINX.md).
set -euo pipefail

tests=$(cd "${1:?usage: $0 /path/to/nginx-tests [module.so]}" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
globals="user root; ${TEST_NGINX_GLOBALS:-}"
if [ "${2:-}" != --static ]; then
    module=$(realpath "${2:-$here/target/nginx/ngx_http_weir_module.so}")
    [ -f "$module" ] || { echo "$module missing: make nginx-module" >&2; exit 1; }
    globals="load_module $module; $globals"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$tests/lib" "$work/lib"

for f in "$tests"/limit_req*.t "$tests"/limit_conn*.t; do
    # the has() feature names stay: they ask whether nginx was built with the
    # stock modules, which Test::Nginx checks through nginx -V
    sed -e '/->has(/!{s/limit_req/weir_req/g; s/limit_conn/weir_conn/g}' \
        "$f" > "$work/$(basename "$f")"
done

cd "$work"
TEST_NGINX_BINARY=${TEST_NGINX_BINARY:-/usr/sbin/nginx} \
TEST_NGINX_MODULES=${TEST_NGINX_MODULES:-/usr/lib/nginx/modules} \
TEST_NGINX_GLOBALS="$globals" \
    prove ${PROVE_FLAGS:--v} -I lib limit_req*.t limit_conn*.t

#!/usr/bin/env bash
# The module against nginx.org releases built from source, as operators build them
# (nginx-module/build-nginx.sh): for each version, nginx --with-compat with the module dynamic
# plus the module with the test hooks, then the project's nginx tests (tests/nginx/run.py, all
# but the ASan checks, which run on Debian's nginx) and nginx's own limit_req*/limit_conn* tests
# renamed (run-nginx-tests.sh); for STATIC_VERSION also nginx with weir built in
# (--add-module) and the same tests but those that need the test hooks.
#
#   nginx-module/t/nginx-versions.sh SRC_DIR NGINX_TESTS "VERSIONS" STATIC_VERSION LIBWEIR_A PROMCHECK
#
# SRC_DIR holds nginx-VERSION.tar.gz; builds go to target/nginx-VERSION and are reused.
# A missing SRC_DIR, tarball or NGINX_TESTS is reported as SKIPPED, not as a pass.
set -euo pipefail

src=$1 tests=$2 versions=$3 static=$4 lib=$5 promcheck=$6
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"

if [ -z "$src" ] || [ ! -d "$src" ]; then
    echo "nginx-versions: SKIPPED every nginx.org release: no tarballs at ../shared/nginx-src" \
        "(set NGINX_SRC_DIR=DIR holding nginx-VERSION.tar.gz)"
    exit 0
fi

# step LABEL COMMAND...: runs COMMAND and says how long it took
step() {
    local t=$SECONDS label=$1
    shift
    "$@"
    echo "nginx-versions: $label: $((SECONDS - t))s"
}

# own_tests BINARY MODULE|--static: nginx's own tests, or a loud SKIPPED without a checkout
own_tests() {
    if [ -n "$tests" ]; then
        TEST_NGINX_BINARY=$1 PROVE_FLAGS= bash nginx-module/t/run-nginx-tests.sh "$tests" "$2"
    else
        echo "nginx-versions: SKIPPED nginx's own limit_req/limit_conn tests on $1:" \
            "no nginx-tests checkout (set NGINX_TESTS=DIR)"
    fi
}

start=$SECONDS
for v in $versions; do
    tarball=$src/nginx-$v.tar.gz
    if [ ! -f "$tarball" ]; then
        echo "nginx-versions: SKIPPED nginx $v: $tarball missing"
        continue
    fi
    out=target/nginx-$v
    step "$v build" nginx-module/build-nginx.sh "$tarball" "$out" "$lib" dynamic
    step "$v build test hooks" nginx-module/build-nginx.sh "$tarball" "$out" "$lib" test
    step "$v run.py" python3 tests/nginx/run.py --nginx "$out/dynamic/nginx" \
        --module "$out/dynamic/ngx_http_weir_module.so" \
        --test-module "$out/test/ngx_http_weir_module.so" --promcheck "$promcheck"
    step "$v nginx-tests" own_tests "$PWD/$out/dynamic/nginx" "$out/dynamic/ngx_http_weir_module.so"
    if [ "$v" = "$static" ]; then
        step "$v build static" nginx-module/build-nginx.sh "$tarball" "$out" "$lib" static
        step "$v static run.py" python3 tests/nginx/run.py --static --nginx "$out/static/nginx" --promcheck "$promcheck"
        step "$v static nginx-tests" own_tests "$PWD/$out/static/nginx" --static
    fi
done
echo "nginx-versions: done in $((SECONDS - start))s"

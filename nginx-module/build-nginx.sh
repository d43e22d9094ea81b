#!/usr/bin/env bash
# Builds an nginx.org release from its tarball with weir, the way a from-source operator does
# (docs/NGINX.md, "Build and install"):
#
#   nginx-module/build-nginx.sh TARBALL OUT_DIR LIBWEIR_A dynamic|test|static
#
#   dynamic  ./configure --with-compat --add-dynamic-module=nginx-module; make (nginx + module)
#            -> OUT_DIR/dynamic/nginx, OUT_DIR/dynamic/ngx_http_weir_module.so
#   test     the module alone with the test hooks (-DWEIR_TEST_HOOKS=1), `make modules`;
#            loadable into the `dynamic` nginx of the same version thanks to --with-compat
#            -> OUT_DIR/test/ngx_http_weir_module.so
#   static   ./configure --add-module=nginx-module; make (weir inside the binary)
#            -> OUT_DIR/static/nginx
#
# The tarball is unpacked once into OUT_DIR/src; each kind configures its own objects directory
# (OUT_DIR/KIND/objs) and keeps it, so a second run only recompiles what changed.  nginx's default
# module set: the tests need proxy, rewrite (return), fastcgi/uwsgi/scgi (their temp paths in
# the test configs), limit_req and limit_conn (nginx's own tests); plus HTTP/2 and auth_request
# (charge_on_status over h2c, with a subrequest).
set -euo pipefail

tarball=$(realpath "${1:?usage: $0 TARBALL OUT_DIR LIBWEIR_A dynamic|test|static}")
out=$(mkdir -p "$2" && cd "$2" && pwd)
lib=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
kind=$4
here=$(cd "$(dirname "$0")" && pwd)
jobs=${NGX_JOBS:-2}

[ -f "$lib" ] || { echo "build-nginx.sh: $lib missing: run make lib" >&2; exit 1; }

src=$out/src
if [ ! -d "$src/auto" ] || [ "$(cat "$out/src.stamp" 2>/dev/null)" != "$tarball" ]; then
    rm -rf "$src" "$out"/*/objs
    mkdir -p "$src"
    tar -xzf "$tarball" -C "$src" --strip-components=1
    echo "$tarball" > "$out/src.stamp"
fi

modules=(--with-http_v2_module --with-http_auth_request_module)
case $kind in
    dynamic) args=(--with-compat "${modules[@]}" --add-dynamic-module="$here"); target=build ;;
    test)    args=(--with-compat "${modules[@]}" --with-cc-opt="-DWEIR_TEST_HOOKS=1"
                   --add-dynamic-module="$here")
             target=modules ;;
    static)  args=("${modules[@]}" --add-module="$here"); target=build ;;
    *) echo "build-nginx.sh: unknown kind $kind" >&2; exit 1 ;;
esac

dir=$out/$kind
objs=$dir/objs
mkdir -p "$dir"
# a changed config (its list of sources) or library path needs a new configure
stamp="${args[*]}|$lib|$(cksum < "$here/config")"
if [ ! -f "$objs/Makefile" ] || [ "$(cat "$dir/objs.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$objs"
    (
        cd "$src"
        # release tarballs have ./configure, a snapshot of the repository auto/configure
        conf=./configure
        [ -f "$conf" ] || conf=./auto/configure
        WEIR_LIB="$lib" $conf "${args[@]}" --builddir="$objs" >"$dir/configure.log" 2>&1 \
            || { tail -20 "$dir/configure.log" >&2; exit 1; }
    )
    echo "$stamp" > "$dir/objs.stamp"
fi

# the library is an input the generated Makefile does not know about
rm -f "$objs/ngx_http_weir_module.so" "$objs/nginx"
make -s -j"$jobs" -C "$src" -f "$objs/Makefile" "$target" >"$dir/make.log" 2>&1 \
    || { cat "$dir/make.log" >&2; exit 1; }
if [ "$kind" != test ]; then
    cp "$objs/nginx" "$dir/nginx"
fi
if [ "$kind" != static ]; then
    cp "$objs/ngx_http_weir_module.so" "$dir/ngx_http_weir_module.so"
fi
echo "built $kind ($(basename "$tarball")) in $dir"

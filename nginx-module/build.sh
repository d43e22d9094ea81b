#!/usr/bin/env bash
# Builds ngx_http_weir_module.so for the nginx installed from Debian (1.22),
# binary compatible with /usr/sbin/nginx (same configure flags, so the same
# module signature).  Needs nginx-dev (/usr/share/nginx/src).
#
#   nginx-module/build.sh OUT_DIR LIBWEIR_A [EXTRA_CFLAGS [EXTRA_LDFLAGS]]
#
# OUT_DIR/ngx_http_weir_module.so is the result; OUT_DIR/build holds nginx's
# configured tree and objects (reused by the next run).
set -euo pipefail

out=$(mkdir -p "$1" && cd "$1" && pwd)
lib=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
extra_cflags=${3:-}
extra_ldflags=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
src=${NGINX_SRC:-/usr/share/nginx/src}

[ -f "$src/configure" ] || { echo "build.sh: $src/configure missing: apt-get install nginx-dev" >&2; exit 1; }
[ -f "$lib" ] || { echo "build.sh: $lib missing: run make lib" >&2; exit 1; }

tree=$out/build/src
objs=$out/build/objs
# a changed config (its list of sources) needs a new configure
stamp="$extra_cflags|$extra_ldflags|$lib|$here|$(cksum < "$here/config")"

if [ ! -f "$objs/Makefile" ] || [ "$(cat "$out/build/stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$out/build"
    mkdir -p "$out/build"
    cp -a "$src" "$tree"
    (
        cd "$tree"
        # shellcheck disable=SC1091
        . ./conf_flags
        WEIR_LIB="$lib" ./configure \
            --with-cc-opt="$(dpkg-buildflags --get CFLAGS) -fPIC $(dpkg-buildflags --get CPPFLAGS) $extra_cflags" \
            --with-ld-opt="$(dpkg-buildflags --get LDFLAGS) -fPIC $extra_ldflags" \
            "${NGX_CONF_FLAGS[@]}" \
            --add-dynamic-module="$here" \
            --builddir="$objs" >"$out/build/configure.log" 2>&1 \
            || { tail -20 "$out/build/configure.log" >&2; exit 1; }
    )
    echo "$stamp" > "$out/build/stamp"
fi

# the library is an input the generated Makefile does not know about
rm -f "$objs/ngx_http_weir_module.so"
make -s -C "$tree" -f "$objs/Makefile" modules >"$out/build/make.log" 2>&1 \
    || { cat "$out/build/make.log" >&2; exit 1; }
cp "$objs/ngx_http_weir_module.so" "$out/ngx_http_weir_module.so"
echo "built $out/ngx_http_weir_module.so"

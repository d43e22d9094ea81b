#!/bin/bash
# The C ABI the pkg-config way (docs/C-API.md).
#
#   install.sh OUT                 installs OUT/libweir.a, OUT/libweir.so, include/weir.h and
#                                  weir.pc under $DESTDIR$PREFIX (PREFIX default /usr/local);
#                                  the libraries without debug info (SPLIT_DEBUG=1: the shared
#                                  library's goes to lib/.debug/, where gdb looks for it)
#   install.sh --uninstalled OUT   OUT/weir-uninstalled.pc, pointing into this tree, and the
#                                  soname link next to OUT/libweir.so
#
# OUT is cargo's release directory; NATIVE_LIBS the libraries a static link needs (Makefile).
set -euo pipefail

uninstalled=
if [ "${1:-}" = --uninstalled ]; then
    uninstalled=1
    shift
fi
out=${1:?usage: install.sh [--uninstalled] CARGO_RELEASE_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/ffi/Cargo.toml" | head -1)
soname=$(readelf -d "$out/libweir.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] || { echo "install.sh: $out/libweir.so has no soname" >&2; exit 1; }

# pc PREFIX LIBDIR INCLUDEDIR: weir.pc on stdout.
pc() {
    sed -e "s|@PREFIX@|$1|" -e "s|@LIBDIR@|$2|" -e "s|@INCLUDEDIR@|$3|" \
        -e "s|@VERSION@|$version|" -e "s|@NATIVE_LIBS@|${NATIVE_LIBS:?}|" "$root/ffi/weir.pc.in"
}

if [ -n "$uninstalled" ]; then
    abs=$(cd "$out" && pwd)
    ln -sf libweir.so "$abs/$soname"
    pc "$root" "$abs" "$root/include" > "$abs/weir-uninstalled.pc"
    exit 0
fi

prefix=${PREFIX:-/usr/local}
lib=${DESTDIR:-}$prefix/lib
inc=${DESTDIR:-}$prefix/include
real=libweir.so.$version
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The archive keeps its symbol table (--strip-debug, not --strip-all, or it no longer links).
cp "$out/libweir.a" "$tmp/libweir.a"
strip --strip-debug "$tmp/libweir.a"
cp "$out/libweir.so" "$tmp/$real"
if [ -n "${SPLIT_DEBUG:-}" ]; then
    objcopy --only-keep-debug "$tmp/$real" "$tmp/$real.debug"
    install -d "$lib/.debug"
    install -m 644 "$tmp/$real.debug" "$lib/.debug/$real.debug"
fi
strip --strip-unneeded "$tmp/$real"
if [ -n "${SPLIT_DEBUG:-}" ]; then
    objcopy --add-gnu-debuglink="$tmp/$real.debug" "$tmp/$real"
fi

install -d "$lib/pkgconfig" "$inc"
install -m 644 "$root/include/weir.h" "$inc/weir.h"
install -m 644 "$tmp/libweir.a" "$lib/libweir.a"
install -m 755 "$tmp/$real" "$lib/$real"
ln -sf "$real" "$lib/$soname"
ln -sf "$soname" "$lib/libweir.so"
# shellcheck disable=SC2016 # ${prefix} is pkg-config's variable
pc "$prefix" '${prefix}/lib' '${prefix}/include' > "$lib/pkgconfig/weir.pc"
echo "installed weir $version under ${DESTDIR:-}$prefix"

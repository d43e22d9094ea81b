#!/bin/bash
# make install into a temporary prefix, then docs/C-API.md's host.c and its compile commands,
# taken from the page as written: linked against the installed shared library, statically
# through `pkg-config --static`, and against the tree through weir-uninstalled.pc; each run.
# Also: the DESTDIR layout, the soname links, no debug info in what is installed, SPLIT_DEBUG.
#
#   [ARM64_LIB=...] install_test.sh CARGO_RELEASE_DIR   (after make lib pc [dist-arm64])
set -euo pipefail

out=$(cd "${1:?usage: install_test.sh CARGO_RELEASE_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
doc=$root/docs/C-API.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install-test: $*" >&2; exit 1; }

# block START KIND: the first ```KIND block after the line that starts with START.
block() {
    awk -v start="$1" -v fence="\`\`\`$2" '
        index($0, start) == 1 { found = 1; next }
        found && !inside && $0 == fence { inside = 1; next }
        inside && $0 == "```" { exit }
        inside { print }' "$doc"
}
# debug_sections FILE: the .debug_* sections of FILE (of every member of an archive).
debug_sections() { readelf -SW "$1" | grep -o '\.debug_[a-z_]*' | sort -u || true; }

make -s -C "$root" install PREFIX="$tmp/prefix" > /dev/null
make -s -C "$root" install PREFIX=/opt/weir DESTDIR="$tmp/stage" SPLIT_DEBUG=1 > /dev/null

lib=$tmp/prefix/lib
soname=$(readelf -d "$lib/libweir.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libweir.so.0.1 ] || fail "soname is '$soname', expected libweir.so.0.1"
[ "$(readlink "$lib/libweir.so")" = libweir.so.0.1 ] || fail "libweir.so does not link to the soname"
[ "$(readlink "$lib/libweir.so.0.1")" = libweir.so.0.1.0 ] || fail "the soname does not link to libweir.so.0.1.0"
cmp -s "$tmp/prefix/include/weir.h" "$root/include/weir.h" || fail "installed weir.h differs"
for f in "$lib/libweir.so.0.1.0" "$lib/libweir.a"; do
    [ -z "$(debug_sections "$f")" ] || fail "$f has debug info: $(debug_sections "$f" | tr '\n' ' ')"
done
[ -n "$(debug_sections "$out/libweir.a")" ] || fail "the built libweir.a has no debug info to strip"

stage=$tmp/stage/opt/weir/lib
grep -qx 'prefix=/opt/weir' "$stage/pkgconfig/weir.pc" || fail "DESTDIR leaked into weir.pc"
[ -f "$tmp/stage/opt/weir/include/weir.h" ] || fail "DESTDIR install has no weir.h"
readelf -p .gnu_debuglink "$stage/libweir.so.0.1.0" | grep -q 'libweir.so.0.1.0.debug' \
    || fail "SPLIT_DEBUG: no debug link"
debug_sections "$stage/.debug/libweir.so.0.1.0.debug" | grep -qx .debug_info \
    || fail "SPLIT_DEBUG: no .debug_info in lib/.debug/libweir.so.0.1.0.debug"

# The page's host and commands.
cd "$tmp"
block 'A complete host, `host.c`' c > host.c
[ -s host.c ] || fail "no host.c in $doc"
block 'Link it against the shared library' sh > link.sh
block 'From the tree, without installing' sh > tree.sh
mapfile -t links < <(grep '^cc ' link.sh)
[ "${#links[@]}" = 2 ] || fail "expected 2 cc commands in the link block, found ${#links[@]}"
run=$(grep '^\./host ' link.sh)
expect=$(sed -n 's/.*# \([0-9]* passed, [0-9]* rejected\).*/\1/p' <<< "$run")
[ -n "$expect" ] || fail "the link block's ./host line does not say what it prints"
ln -s "$root/examples" examples

# check LABEL NEEDED_WEIR: runs ./host as the page does; NEEDED_WEIR is whether the binary
# must load libweir.so.
check() {
    local got
    got=$(eval "${run%%#*}") || fail "$1: ./host failed"
    [ "$got" = "$expect" ] || fail "$1: ./host printed '$got', expected '$expect'"
    if readelf -d host | grep -q "NEEDED.*\[$soname\]"; then
        [ "$2" = yes ] || fail "$1: host loads libweir.so"
    else
        [ "$2" = no ] || fail "$1: host does not load libweir.so"
    fi
    echo "install-test: $1: $got ($(du -k host | cut -f1) KiB)"
}

export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_DISABLE_UNINSTALLED=1
eval "${links[0]}"
LD_LIBRARY_PATH=$lib check "installed, shared" yes
eval "${links[1]}" 2> static.err || { cat static.err >&2; fail "static link failed"; }
LD_LIBRARY_PATH=/nonexistent check "installed, static" no
# About 5.1 MiB since cluster zones speak TLS (rustls + ring, +1.7 MiB) and Redis Cluster.
[ "$(du -k host | cut -f1)" -lt 6144 ] || fail "the static host is over 6 MiB: debug info?"

mkdir -p tree/target && ln -s "$out" tree/target/release && cp host.c tree/ && ln -s "$root/examples" tree/
cd tree
unset PKG_CONFIG_DISABLE_UNINSTALLED
eval "$(cat ../tree.sh)"
[ "$(pkg-config --variable=libdir weir)" = "$out" ] || fail "pkg-config did not take weir-uninstalled.pc"
LD_LIBRARY_PATH=/nonexistent check "in the tree" yes

# ARM64_LIB: the library of the linux/arm64 Caddy tarball (make dist-arm64); the same host,
# cross-compiled against it, runs under qemu-aarch64.
if [ -n "${ARM64_LIB:-}" ]; then
    aarch64-linux-gnu-gcc -I"$root/include" host.c "$ARM64_LIB" -lm -ldl -lpthread -lrt -lutil \
        -lgcc_s -o host || fail "arm64: cross-compiling host.c against $ARM64_LIB failed"
    readelf -h host | grep -q 'Machine:.*AArch64' || fail "arm64: host is not an AArch64 binary"
    run="qemu-aarch64 -L /usr/aarch64-linux-gnu $run"
    check "linux/arm64 (qemu)" no
fi
echo "install-test: passed"

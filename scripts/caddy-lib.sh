#!/usr/bin/env bash
# Makes target/caddy/libweir_caddy.a from libweir.a for the Caddy plugin (cgo).
#
# A Rust staticlib carries the Rust standard library with global symbols. Go links every cgo
# archive of a binary into one executable, so two Rust-based plugins in one Caddy would clash
# (duplicate std/alloc/panic symbols, or worse, silently bind to each other's copies). We link
# the objects weir_* needs into one relocatable object (ld -r) and make every symbol local
# except the weir_* API (objcopy --keep-global-symbols), dropping debug info and the embedded
# LLVM bitcode (which the system's LLVM 14 linker plugin cannot read).
# CROSS=aarch64-linux-gnu- uses that binutils prefix (a library cross-built for linux/arm64).
set -euo pipefail
nm=${CROSS:-}nm ld=${CROSS:-}ld objcopy=${CROSS:-}objcopy ar=${CROSS:-}ar
lib=${1:?usage: caddy-lib.sh path/to/libweir.a outdir}
out=${2:?usage: caddy-lib.sh path/to/libweir.a outdir}
mkdir -p "$out"
syms="$out/weir.syms"
$nm -g --defined-only "$lib" 2>/dev/null | awk '$3 ~ /^weir_/ {print $3}' | sort -u > "$syms"
[ -s "$syms" ] || { echo "caddy-lib: no weir_* symbols in $lib" >&2; exit 1; }
$ld -r $(sed 's/^/-u /' "$syms") "$lib" -o "$out/weir_all.o"
$objcopy --strip-debug --remove-section=.llvmbc --remove-section=.llvmcmd \
    --keep-global-symbols="$syms" "$out/weir_all.o" "$out/weir_caddy.o"
rm -f "$out/libweir_caddy.a.tmp" "$out/weir_all.o"
$ar rcs "$out/libweir_caddy.a.tmp" "$out/weir_caddy.o"
rm -f "$out/weir_caddy.o"
# Only weir_* may be defined globally.
bad=$($nm -g --defined-only "$out/libweir_caddy.a.tmp" | awk 'NF==3 && $3 !~ /^weir_/ {print $3}' | head -5)
if [ -n "$bad" ]; then echo "caddy-lib: non-weir global symbols left: $bad" >&2; exit 1; fi
mv "$out/libweir_caddy.a.tmp" "$out/libweir_caddy.a"
echo "caddy-lib: $out/libweir_caddy.a ($(wc -l < "$syms") weir_* symbols global, the rest local)"

#!/usr/bin/env bash
# Writes the Caddy plugin as a self-contained Go module tarball:
#   OUTDIR/weir-caddy-VERSION-PLATFORM.tar.gz, one directory of the same name holding
#   go.mod, go.sum, the plugin's sources (no tests, no test hooks), lib/weir.h and
#   lib/PLATFORM/libweir_caddy.a, where cgo.go's ${SRCDIR}-relative #cgo lines find them.
# Usage: caddy-dist.sh PLUGIN_DIR VERSION PLATFORM OUTDIR (PLUGIN_DIR/lib filled by caddy-lib).
set -euo pipefail
src=${1:?usage: caddy-dist.sh plugin_dir version platform outdir}
version=${2:?version}
platform=${3:?platform, e.g. linux_amd64}
outdir=${4:?outdir}
name="weir-caddy-$version-${platform/_/-}"
lib="$src/lib/$platform/libweir_caddy.a"
[ -f "$lib" ] && [ -f "$src/lib/weir.h" ] || { echo "caddy-dist: $lib or weir.h missing (make caddy-lib)" >&2; exit 1; }
stage="$outdir/$name"
rm -rf "$stage"
mkdir -p "$stage/lib/$platform"
cp "$src/go.mod" "$src/go.sum" "$stage/"
for f in "$src"/*.go; do
    case "$f" in
    *_test.go) ;;
    *) grep -q '^//go:build weirtest' "$f" || cp "$f" "$stage/" ;;
    esac
done
cp "$src/lib/weir.h" "$stage/lib/"
cp "$lib" "$stage/lib/$platform/"
cat > "$stage/README.md" <<README
# weir $version for Caddy v2 ($platform)

The Caddy plugin (Go module github.com/weir-rs/weir/caddy-plugin) with weir's C library
prebuilt for $platform. Build Caddy with it (Go, xcaddy and a C toolchain installed):

    CGO_ENABLED=1 xcaddy build --with github.com/weir-rs/weir/caddy-plugin@v0.0.0=\$PWD/$name

Configuration: docs/CADDY.md in the weir repository.
README
tar -C "$outdir" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -czf "$outdir/$name.tar.gz" "$name"
rm -rf "$stage"
echo "caddy-dist: $outdir/$name.tar.gz ($(du -k "$outdir/$name.tar.gz" | cut -f1) KiB)"

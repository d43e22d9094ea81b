#!/usr/bin/env bash
# Builds the Debian packages with dpkg-deb (docs/NGINX.md, "Debian package"):
#
#   packaging/debian/build.sh OUT_DIR MODULE.so WEIR_BINARY
#
#   libnginx-mod-http-weir  the module for the installed Debian nginx, laid out as Debian's own
#                           libnginx-mod-* packages: the .so in /usr/lib/nginx/modules, the
#                           load_module line in /usr/share/nginx/modules-available, the
#                           modules-enabled link made by postinst; depends on the exact nginx
#                           ABI (the nginx-abi-* the installed nginx Provides)
#   weir                    the command line, /usr/bin/weir
#
# The version is Cargo.toml's; the library dependencies come from dpkg-shlibdeps.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
module=$(realpath "$2")
cli=$(realpath "$3")

version=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")-1
arch=$(dpkg --print-architecture)
abi=$(dpkg-query -W -f '${Provides}' nginx 2>/dev/null | tr ',' '\n' | tr -d ' ' | grep '^nginx-abi-' || true)
[ -n "$abi" ] || { echo "packaging: the installed nginx provides no nginx-abi-*: apt-get install nginx" >&2; exit 1; }
maintainer="weir maintainers <weir@users.noreply.github.com>"

# stage PACKAGE: a fresh tree with the copyright file
stage() {
    rm -rf "$out/$1"
    mkdir -p "$out/$1/DEBIAN" "$out/$1/usr/share/doc/$1"
    install -m 644 "$here/copyright" "$out/$1/usr/share/doc/$1/copyright"
}

# shlibdeps PACKAGE FILE: the Depends of FILE's shared libraries
shlibdeps() {
    local tmp
    tmp=$(mktemp -d)
    mkdir "$tmp/debian"
    printf 'Source: weir\n\nPackage: %s\nArchitecture: any\n' "$1" > "$tmp/debian/control"
    (cd "$tmp" && dpkg-shlibdeps -O "$2" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
    rm -rf "$tmp"
}

# finish PACKAGE DEPENDS DESCRIPTION...: control, md5sums, dpkg-deb
finish() {
    local pkg=$1 depends=$2 d=$out/$1
    shift 2
    (cd "$d" && find usr -type f -print0 | sort -z | xargs -0 md5sum > DEBIAN/md5sums)
    {
        echo "Package: $pkg"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: $maintainer"
        echo "Installed-Size: $(du -sk --exclude=DEBIAN "$d" | cut -f1)"
        echo "Depends: $depends"
        [ "$pkg" = weir ] || echo "Recommends: nginx"
        if [ "$pkg" = weir ]; then echo "Section: net"; else echo "Section: httpd"; fi
        echo "Priority: optional"
        echo "Homepage: https://github.com/weir-rs/weir"
        printf 'Description: %s\n' "$1"
        shift
        for line in "$@"; do printf ' %s\n' "$line"; done
    } > "$d/DEBIAN/control"
    dpkg-deb --root-owner-group -Zxz --build "$d" "$out/${pkg}_${version}_${arch}.deb" >/dev/null
    echo "built $out/${pkg}_${version}_${arch}.deb"
}

pkg=libnginx-mod-http-weir
stage $pkg
install -D -m 644 "$module" "$out/$pkg/usr/lib/nginx/modules/ngx_http_weir_module.so"
strip --strip-unneeded "$out/$pkg/usr/lib/nginx/modules/ngx_http_weir_module.so"
install -D -m 644 "$here/mod-http-weir.conf" "$out/$pkg/usr/share/nginx/modules-available/mod-http-weir.conf"
for s in postinst prerm postrm; do
    install -m 755 "$here/$pkg.$s" "$out/$pkg/DEBIAN/$s"
done
finish $pkg "$abi, $(shlibdeps $pkg "$out/$pkg/usr/lib/nginx/modules/ngx_http_weir_module.so")" \
    "weir rate limiting for nginx" \
    "weir_req / weir_conn (limit_req / limit_conn with weir's fixed-memory zones) and" \
    "weir_policy (one TOML policy: classes, exemptions, queues, RateLimit headers," \
    "Prometheus counters) for Debian's nginx."

pkg=weir
stage $pkg
install -D -m 755 "$cli" "$out/$pkg/usr/bin/weir"
strip --strip-unneeded "$out/$pkg/usr/bin/weir"
finish $pkg "$(shlibdeps $pkg "$out/$pkg/usr/bin/weir")" \
    "weir rate-limit policy tool" \
    "Checks weir policies (file:line:col errors and pitfalls) and replays nginx or Caddy" \
    "access logs through a policy to show what each limit would have done."

#!/usr/bin/env bash
# The release tarball the way a user takes it: unpacked into a temporary directory outside
# the repository, Caddy built from it by xcaddy (CGO_ENABLED=1, no other setting), started on
# 127.0.0.1 with a Caddyfile using weir, and a third request inside a 2-event window refused.
# Usage: caddy-dist-test.sh TARBALL XCADDY CADDY_VERSION
# Cross builds: GOARCH (and CC) for the build, RUN for the runner (e.g. qemu-aarch64 -L ...).
set -euo pipefail
tarball=$(realpath "${1:?usage: caddy-dist-test.sh tarball xcaddy caddy_version}")
xcaddy=$(realpath "${2:?xcaddy}")
caddy_version=${3:?caddy version}
tmp=$(mktemp -d /tmp/weir-dist.XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT

tar -C "$tmp" -xzf "$tarball"
dir="$tmp/$(basename "$tarball" .tar.gz)"
[ -f "$dir/go.mod" ] || { echo "caddy-dist-test: no module at $dir" >&2; exit 1; }
if ls "$dir"/*_test.go >/dev/null 2>&1 || grep -q '^//go:build weirtest' "$dir"/*.go; then
    echo "caddy-dist-test: tests or test hooks in the tarball" >&2; exit 1
fi
(cd "$tmp" && CGO_ENABLED=1 XCADDY_SKIP_CLEANUP=0 timeout 900 "$xcaddy" build "$caddy_version" \
    --with "github.com/weir-rs/weir/caddy-plugin@v0.0.0=$dir" --output "$tmp/caddy")
# Listed first, then searched: `grep -q` quitting at the first match would end list-modules
# with SIGPIPE, which pipefail reports as a failure.
modules=$(${RUN:-} "$tmp/caddy" list-modules)
for m in http.handlers.weir http.handlers.weir_status admin.api.weir; do
    grep -qx "$m" <<<"$modules" || { echo "caddy-dist-test: $m not in the built Caddy" >&2; exit 1; }
done

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$tmp/Caddyfile" <<CADDYFILE
{
	admin off
	persist_config off
}
http://127.0.0.1:$port {
	weir {
		zone z {
			key static
			events 2
			window 1m
		}
	}
	respond "ok"
}
CADDYFILE
mkdir "$tmp/home"
HOME=$tmp/home XDG_CONFIG_HOME=$tmp/home XDG_DATA_HOME=$tmp/home ${RUN:-} "$tmp/caddy" run --config "$tmp/Caddyfile" \
    --adapter caddyfile > "$tmp/caddy.log" 2>&1 &
pid=$!
status() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/" || true; }
first=000
for _ in $(seq 100); do # until Caddy listens: the first request that gets an answer
    first=$(status)
    [ "$first" != 000 ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/caddy.log" >&2; exit 1; }
    sleep 0.1
done
codes="$first $(status) $(status)"
if [ "$codes" != "200 200 429" ]; then
    echo "caddy-dist-test: statuses $codes, want 200 200 429" >&2
    cat "$tmp/caddy.log" >&2
    exit 1
fi
echo "caddy-dist-test: $(basename "$tarball") built Caddy $caddy_version with weir${GOARCH:+ for $GOARCH}; 429 after 2 requests"

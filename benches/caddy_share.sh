#!/usr/bin/env bash
# weir's own share of Caddy's CPU, from Go CPU profiles taken while wrk drives one route: the
# samples with a frame of weir's plugin (its handler, and anything else of it that runs) minus
# those of the next handler (`respond`), over all of Caddy's samples. Unlike req/s or CPU per
# request compared across wrk runs (rounds on this kind of machine differ by ±10–20 %), both
# numbers come from the same process over the same seconds.
#
# Routes (benches/caddy_routes.sh, limits above the offered load): `zone` an inline GCRA zone,
# `log` caddy-ratelimit's zone shape (weir's sliding log; hot: 4096 events per 50 ms, churn: 10
# per 1 s), `policy` a policy file with the same GCRA limit (key `global` for hot,
# `header:X-Key` for churn). With CADDY_RATELIMIT=/path/to/caddy
# (a Caddy with github.com/mholt/caddy-ratelimit, e.g. `make caddy-ratelimit`), also `crl`: the
# log route's zone through caddy-ratelimit in that Caddy, whose share counts every sample with
# a frame of caddy-ratelimit (its handler and its background sweeper). Loads: `churn` a random
# X-Key out of a million per request, `hot` one key. Caddy runs on CPU 1 with GOMAXPROCS=1, wrk
# on CPU 0. 127.0.0.1 only; needs target/caddy/caddy (make caddy), wrk and Go (`go tool pprof`).
#
#   bash benches/caddy_share.sh   # PROFILES=3 SECONDS_PER=30 ROUTES="zone log policy [crl]" LOADS=churn
set -euo pipefail
cd "$(dirname "$0")/.."
CADDY=$(realpath "${CADDY:-target/caddy/caddy}")
PROFILES=${PROFILES:-3}
SECONDS_PER=${SECONDS_PER:-30}
CRL=${CADDY_RATELIMIT:-}
ROUTES=${ROUTES:-zone log policy${CRL:+ crl}}
LOADS=${LOADS:-churn}
PORT=${PORT:-18680}
ADMIN=${ADMIN:-18679}
PORT2=${PORT2:-18682}
ADMIN2=${ADMIN2:-18681}
command -v wrk >/dev/null || { echo "caddy_share: wrk not installed (apt-get install wrk)"; exit 1; }
[ -x "$CADDY" ] || { echo "caddy_share: $CADDY missing (make caddy)"; exit 1; }
work=$(mktemp -d)
pid=
pid2=
# A stopped Caddy (see below) must be continued before it can act on SIGTERM.
trap 'kill -CONT $pid $pid2 2>/dev/null || true; kill $pid $pid2 2>/dev/null || true; wait $pid $pid2 2>/dev/null || true; rm -rf "$work"' EXIT

. benches/caddy_routes.sh
caddy_routes_write "$work" "$PORT" "$ADMIN" "$PORT2" "$ADMIN2"
server=(env GOMAXPROCS=1 taskset -c 1)
caddy_start "$CADDY" "$work/Caddyfile" "$PORT" "$work/caddy.log" "${server[@]}"
pid=$started
if [ -n "$CRL" ]; then
	CRL=$(realpath "$CRL")
	caddy_start "$CRL" "$work/Caddyfile.crl" "$PORT2" "$work/caddy-crl.log" "${server[@]}"
	pid2=$started
fi

# share BINARY FILE PACKAGE → "seconds_with_the_package total_seconds"
share() {
	local top total part
	top=$(go tool pprof -top -nodecount=1000000 -nodefraction=0 -edgefraction=0 -focus "$3" \
		-ignore StaticResponse "$1" "$2" 2>/dev/null)
	total=$(sed -n 's/.*Total samples = \([0-9.]*\)\(m\?s\).*/\1 \2/p' <<<"$top" | awk '{ print ($2 == "ms") ? $1 / 1000 : $1 }')
	part=$(sed -n 's/.*Showing nodes accounting for \([0-9.]*\)\(m\?s\),.*/\1 \2/p' <<<"$top" | awk '{ print ($2 == "ms") ? $1 / 1000 : $1 }')
	echo "${part:-0} ${total:-0}"
}

echo "Caddy $("$CADDY" version | cut -d' ' -f1), $PROFILES profile(s) × ${SECONDS_PER}s per route, load $(cut -d' ' -f1-3 /proc/loadavg)"
for load in $LOADS; do
	for route in $ROUTES; do
		bin=$CADDY port=$PORT admin=$ADMIN path=/$route-$load pkg='weir-rs/weir/caddy-plugin' target=$pid
		case $route in
		zone) path=/zone ;;
		crl) bin=$CRL port=$PORT2 admin=$ADMIN2 path=/log-$load pkg='mholt/caddy-ratelimit' target=$pid2 ;;
		esac
		[ -n "$target" ] || { echo "caddy_share: route crl needs CADDY_RATELIMIT"; exit 1; }
		# Only the profiled Caddy runs (the other one's sweeps and GC would share its CPU).
		for p in $pid $pid2; do [ "$p" = "$target" ] || kill -STOP "$p"; done
		kill -CONT "$target"
		url="http://127.0.0.1:$port$path"
		# Warm up: fill the table's working set and let the Go heap settle.
		taskset -c 0 wrk -t1 -c32 -d5s -s "$work/$load.lua" "$url" > /dev/null
		for i in $(seq "$PROFILES"); do
			taskset -c 0 wrk -t1 -c32 -d$((SECONDS_PER + 4))s -s "$work/$load.lua" "$url" > "$work/wrk.txt" &
			wrk_pid=$!
			sleep 1
			prof="$work/$route-$load.$i.pb.gz"
			curl -fs -o "$prof" "http://127.0.0.1:$admin/debug/pprof/profile?seconds=$SECONDS_PER"
			wait $wrk_pid
			read -r w t <<<"$(share "$bin" "$prof" "$pkg")"
			printf '%-7s %-5s profile %d: %6.2f s of %6.2f s = %5.2f %%  (%s req/s)\n' "$route" "$load" "$i" "$w" "$t" \
				"$(awk -v w="$w" -v t="$t" 'BEGIN { print (t > 0) ? 100 * w / t : 0 }')" "$(awk '/Requests\/sec/ {print $2}' "$work/wrk.txt")"
			echo "$route/$load $w $t" >> "$work/shares"
		done
	done
done
echo
echo "pooled over the profiles (the limiter's samples ÷ Caddy's; what it adds to plain Caddy = share ÷ (1 − share)):"
awk '{ w[$1] += $2; t[$1] += $3; n[$1]++ } END { for (r in w) printf "%-13s %5.2f %% of Caddy CPU, +%.2f %% over plain (%d profiles)\n", r, 100 * w[r] / t[r], 100 * w[r] / (t[r] - w[r]), n[r] }' "$work/shares" | sort

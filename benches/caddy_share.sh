#!/usr/bin/env bash
# weir's own share of Caddy's CPU, from Go CPU profiles taken while wrk drives one route: the
# samples under weir's ServeHTTP minus the next handler (`respond`), over all of Caddy's samples.
# Unlike req/s or CPU per request compared across wrk runs (rounds on this kind of machine
# differ by ±10–20 %), both numbers come from the same process over the same seconds.
#
# Routes (all under key churn: a random X-Key out of a million per request, limits above the
# offered load): `zone` an inline GCRA zone, `log` caddy-ratelimit's zone shape (weir's sliding
# log), `policy` a policy file with the same GCRA limit keyed by `header:X-Key`. Caddy runs on
# CPU 1 with GOMAXPROCS=1, wrk on CPU 0. 127.0.0.1 only; needs target/caddy/caddy (make caddy),
# wrk and Go (for `go tool pprof`).
#
#   bash benches/caddy_share.sh          # PROFILES=3 SECONDS_PER=30 ROUTES="zone log policy"
set -euo pipefail
cd "$(dirname "$0")/.."
CADDY=$(realpath "${CADDY:-target/caddy/caddy}")
PROFILES=${PROFILES:-3}
SECONDS_PER=${SECONDS_PER:-30}
ROUTES=${ROUTES:-zone log policy}
PORT=${PORT:-18680}
ADMIN=${ADMIN:-18679}
command -v wrk >/dev/null || { echo "caddy_share: wrk not installed (apt-get install wrk)"; exit 1; }
[ -x "$CADDY" ] || { echo "caddy_share: $CADDY missing (make caddy)"; exit 1; }
work=$(mktemp -d)
pid=
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT

cat > "$work/churn.toml" <<'T'
[zones.g]
size = "64m"
algorithm = "gcra"
rate = "1000000r/s"
[[limit]]
class = "*"
zone = "g"
key = "header:X-Key"
burst = 100000
nodelay = true
T
cat > "$work/Caddyfile" <<C
{
	admin 127.0.0.1:$ADMIN
	default_bind 127.0.0.1
	auto_https off
	persist_config off
	log default {
		output discard
	}
}
:$PORT {
	handle /zone {
		weir {
			zone z {
				key {http.request.header.X-Key}
				rate 1000000r/s burst 100000
				size 67108864
			}
		}
		respond "ok"
	}
	handle /log {
		weir {
			zone l {
				key {http.request.header.X-Key}
				events 10
				window 1s
				size 67108864
			}
		}
		respond "ok"
	}
	handle /policy {
		weir {
			policy $work/churn.toml
		}
		respond "ok"
	}
}
C
cat > "$work/churn.lua" <<'L'
math.randomseed(os.time())
request = function()
  wrk.headers["X-Key"] = tostring(math.random(1, 1000000))
  return wrk.format(nil)
end
L
env GOMAXPROCS=1 taskset -c 1 "$CADDY" run --config "$work/Caddyfile" --adapter caddyfile > "$work/caddy.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$PORT/zone" 2>/dev/null && break; sleep 0.1; done
curl -fs -o /dev/null "http://127.0.0.1:$PORT/zone" || { echo "caddy_share: caddy did not start:"; cat "$work/caddy.log"; exit 1; }

# share FILE → "weir_seconds total_seconds"
share() {
	local top total weir
	top=$(go tool pprof -top -cum -focus 'weir.*Handler..ServeHTTP' -ignore StaticResponse "$CADDY" "$1" 2>/dev/null)
	total=$(sed -n 's/.*Total samples = \([0-9.]*\)\(m\?s\).*/\1 \2/p' <<<"$top" | awk '{ print ($2 == "ms") ? $1 / 1000 : $1 }')
	weir=$(awk '/caddy-plugin\.\(\*Handler\)\.ServeHTTP$/ { v = $4; u = (v ~ /ms$/) ? 1000 : 1; sub(/m?s$/, "", v); print v / u; exit }' <<<"$top")
	echo "${weir:-0} $total"
}

echo "Caddy $("$CADDY" version | cut -d' ' -f1), $PROFILES profile(s) × ${SECONDS_PER}s per route, load $(cut -d' ' -f1-3 /proc/loadavg)"
for route in $ROUTES; do
	# Warm up: fill the table's working set and let the Go heap settle.
	taskset -c 0 wrk -t1 -c32 -d5s -s "$work/churn.lua" "http://127.0.0.1:$PORT/$route" > /dev/null
	for i in $(seq "$PROFILES"); do
		taskset -c 0 wrk -t1 -c32 -d$((SECONDS_PER + 4))s -s "$work/churn.lua" "http://127.0.0.1:$PORT/$route" > "$work/wrk.txt" &
		wrk_pid=$!
		sleep 1
		curl -fs -o "$work/$route.$i.pb.gz" "http://127.0.0.1:$ADMIN/debug/pprof/profile?seconds=$SECONDS_PER"
		wait $wrk_pid
		read -r w t <<<"$(share "$work/$route.$i.pb.gz")"
		printf '%-7s profile %d: weir %6.2f s of %6.2f s = %5.2f %%  (%s req/s)\n' "$route" "$i" "$w" "$t" \
			"$(awk -v w="$w" -v t="$t" 'BEGIN { print 100 * w / t }')" "$(awk '/Requests\/sec/ {print $2}' "$work/wrk.txt")"
		echo "$route $w $t" >> "$work/shares"
	done
done
echo
echo "pooled over the profiles (weir's samples ÷ Caddy's; what weir adds to plain Caddy = share ÷ (1 − share)):"
awk '{ w[$1] += $2; t[$1] += $3; n[$1]++ } END { for (r in w) printf "%-7s %5.2f %% of Caddy CPU, +%.2f %% over plain (%d profiles)\n", r, 100 * w[r] / t[r], 100 * w[r] / (t[r] - w[r]), n[r] }' "$work/shares" | sort

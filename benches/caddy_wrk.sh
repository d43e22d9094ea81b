#!/usr/bin/env bash
# wrk load benchmark of the Caddy plugin: plain Caddy vs weir (inline zone and policy), hot
# key and key churn, one run each, 127.0.0.1 only. Needs target/caddy/caddy (make caddy) and
# wrk. caddy-ratelimit is not included: the Go module proxy reachable here refuses
# github.com/mholt/caddy-ratelimit (403), so it cannot be built into this Caddy.
#
#   bash benches/caddy_wrk.sh            # DURATION=10s THREADS=1 CONNS=32 by default
set -euo pipefail
cd "$(dirname "$0")/.."
CADDY=${CADDY:-target/caddy/caddy}
DURATION=${DURATION:-10s}
THREADS=${THREADS:-1}
CONNS=${CONNS:-32}
PORT=${PORT:-18480}
ADMIN=${ADMIN:-18479}
command -v wrk >/dev/null || { echo "caddy_wrk: wrk not installed (apt-get install wrk)"; exit 1; }
[ -x "$CADDY" ] || { echo "caddy_wrk: $CADDY missing (make caddy)"; exit 1; }
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT

# Limits generous enough that (almost) every request passes: we measure the cost of the
# decision, not of rejections.
cat > "$work/hot.toml" <<'T'
[zones.g]
size = "64m"
algorithm = "gcra"
rate = "1000000r/s"
[[limit]]
class = "*"
zone = "g"
key = "global"
burst = 100000
nodelay = true
T
sed -e 's/key = "global"/key = "header:X-Key"/' "$work/hot.toml" > "$work/churn.toml"
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
	handle /plain {
		respond "ok"
	}
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
	handle /policy-hot {
		weir {
			policy $work/hot.toml
		}
		respond "ok"
	}
	handle /policy-churn {
		weir {
			policy $work/churn.toml
		}
		respond "ok"
	}
}
C
"$CADDY" run --config "$work/Caddyfile" --adapter caddyfile > "$work/caddy.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/plain" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs "http://127.0.0.1:$PORT/plain" >/dev/null || { echo "caddy_wrk: caddy did not start:"; cat "$work/caddy.log"; exit 1; }

# hot: every request the same key; churn: a random key out of a million per request.
cat > "$work/hot.lua" <<'L'
wrk.headers["X-Key"] = "hot"
L
cat > "$work/churn.lua" <<'L'
math.randomseed(os.time())
request = function()
  wrk.headers["X-Key"] = tostring(math.random(1, 1000000))
  return wrk.format(nil)
end
L

run() { # name path script
	local out rps p99
	out=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$work/$3.lua" "http://127.0.0.1:$PORT$2")
	rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
	p99=$(awk '$1=="99%" {print $2}' <<<"$out")
	non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
	printf '%-22s %12s req/s  p99 %8s  non-2xx %s\n' "$1" "$rps" "$p99" "${non2xx:-0}"
	echo "$1 $rps" >> "$work/results"
}
echo "wrk -t$THREADS -c$CONNS -d$DURATION, caddy $("$CADDY" version | cut -d' ' -f1), $(nproc) cores"
for k in hot churn; do
	run "plain/$k" /plain $k
	run "weir-zone/$k" /zone $k
	run "weir-policy/$k" "/policy-$k" $k
done
echo
awk '{r[$1]=$2} END {
	for (k in r) if (k ~ /^weir/) { split(k, a, "/"); printf "%-22s %.3f of plain Caddy\n", k, r[k] / r["plain/" a[2]] }
}' "$work/results" | sort

#!/usr/bin/env bash
# wrk load benchmark of the Caddy plugin: plain Caddy vs weir (inline zones and policy), hot
# key and key churn, ROUNDS rounds of every row (interleaved), 127.0.0.1 only. Needs
# target/caddy/caddy (make caddy) and wrk.
#
# Optionally also caddy-ratelimit: CADDY_RATELIMIT=/path/to/caddy, a Caddy binary with
# github.com/mholt/caddy-ratelimit (`make caddy-ratelimit` builds target/caddy/caddy-ratelimit
# from the Go module proxy). It then runs as a
# second Caddy (port PORT2) with the same zone shape as weir's log zones ("crl" rows), plus its
# own plain route ("crl-plain") since it is another binary.
#
# Optionally also another build of weir for before/after comparisons: CADDY_BASE=/path/to/caddy
# (e.g. a `make caddy` of main, copied aside) serves the same weir routes on PORT3 ("base-*"
# rows, compared with this build's plain route like the others).
#
# Each row stops (SIGSTOP) every Caddy but the one it drives. PIN=1 runs every Caddy on CPU 1
# with GOMAXPROCS=1 and wrk on CPU 0 (needs 2 cores), so the load generator and the server do
# not take turns on one core.
#
# Besides req/s, each row reports the serving Caddy's CPU time per request (utime + stime from
# /proc/PID/stat over the wrk run ÷ requests): steadier than req/s on a shared machine, and the
# direct measure of what a handler adds to a request. Rows run in reverse order every other
# round, and the summary ends with each row's per-round ratio to the plain row of the same
# round: mean ± 95 % confidence interval, which says how closely this machine can tell.
# LOADS=churn (or hot) runs one load pattern only.
#
#   bash benches/caddy_wrk.sh            # DURATION=10s THREADS=1 CONNS=32 ROUNDS=1 LOADS="hot churn"
set -euo pipefail
cd "$(dirname "$0")/.."
CADDY=${CADDY:-target/caddy/caddy}
DURATION=${DURATION:-10s}
THREADS=${THREADS:-1}
CONNS=${CONNS:-32}
PORT=${PORT:-18480}
ADMIN=${ADMIN:-18479}
PORT2=${PORT2:-18482}
ADMIN2=${ADMIN2:-18481}
PORT3=${PORT3:-18484}
ADMIN3=${ADMIN3:-18483}
ROUNDS=${ROUNDS:-1}
LOADS=${LOADS:-hot churn}
CRL=${CADDY_RATELIMIT:-}
BASE=${CADDY_BASE:-}
PIN=${PIN:-0}
server=()
client=()
if [ "$PIN" = 1 ]; then
	server=(env GOMAXPROCS=1 taskset -c 1)
	client=(taskset -c 0)
fi
command -v wrk >/dev/null || { echo "caddy_wrk: wrk not installed (apt-get install wrk)"; exit 1; }
[ -x "$CADDY" ] || { echo "caddy_wrk: $CADDY missing (make caddy)"; exit 1; }
work=$(mktemp -d)
pid=
pid2=
pid3=
trap 'kill -CONT $pid $pid2 $pid3 2>/dev/null || true; kill $pid $pid2 $pid3 2>/dev/null || true; wait $pid $pid2 $pid3 2>/dev/null || true; rm -rf "$work"' EXIT

. benches/caddy_routes.sh
caddy_routes_write "$work" "$PORT" "$ADMIN" "$PORT2" "$ADMIN2"
caddy_start "$CADDY" "$work/Caddyfile" "$PORT" "$work/caddy.log" "${server[@]}"
pid=$started

if [ -n "$BASE" ]; then
	[ -x "$BASE" ] || { echo "caddy_wrk: CADDY_BASE=$BASE is not executable"; exit 1; }
	sed -e "s/127.0.0.1:$ADMIN\$/127.0.0.1:$ADMIN3/" -e "s/^:$PORT {/:$PORT3 {/" "$work/Caddyfile" > "$work/Caddyfile.base"
	caddy_start "$BASE" "$work/Caddyfile.base" "$PORT3" "$work/caddy-base.log" "${server[@]}"
	pid3=$started
fi

if [ -n "$CRL" ]; then
	[ -x "$CRL" ] || { echo "caddy_wrk: CADDY_RATELIMIT=$CRL is not executable"; exit 1; }
	caddy_start "$CRL" "$work/Caddyfile.crl" "$PORT2" "$work/caddy-crl.log" "${server[@]}"
	pid2=$started
fi

cpu_ticks() { # pid → utime + stime in clock ticks
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

run() { # name path script [port]
	local out rps p99 reqs t0 t1 us target=$pid
	[ "${4:-$PORT}" != "$PORT2" ] || target=$pid2
	[ "${4:-$PORT}" != "$PORT3" ] || target=$pid3
	# Only the serving Caddy runs: another one's background work (caddy-ratelimit sweeping a
	# million keys, a GC cycle) would otherwise land on this row.
	for p in $pid $pid2 $pid3; do [ "$p" = "$target" ] || kill -STOP "$p"; done
	kill -CONT "$target"
	t0=$(cpu_ticks "$target")
	out=$("${client[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$work/$3.lua" "http://127.0.0.1:${4:-$PORT}$2")
	rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
	p99=$(awk '$1=="99%" {print $2}' <<<"$out")
	non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
	t1=$(cpu_ticks "$target")
	reqs=$(awk '/requests in/ {print $1}' <<<"$out")
	echo "$1 $rps $round" >> "$work/results"
	if [ "${reqs:-0}" = 0 ]; then
		# A Caddy that answered nothing for the whole row (seen with caddy-ratelimit under churn).
		printf '%-22s %12s req/s  no request answered\n' "$1" "$rps"
		return
	fi
	us=$(awk -v d=$((t1 - t0)) -v n="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", d / hz * 1e6 / n }')
	printf '%-22s %12s req/s  p99 %8s  non-2xx %-6s  %6s µs CPU/request\n' "$1" "$rps" "$p99" "${non2xx:-0}" "$us"
	echo "$1 $us $round" >> "$work/cpu"
}
echo "wrk -t$THREADS -c$CONNS -d$DURATION, $ROUNDS round(s), caddy $("$CADDY" version | cut -d' ' -f1), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# Rows run in one order on odd rounds and in the reverse order on even rounds, so that a
# machine whose speed drifts during a round favours no row.
for round in $(seq "$ROUNDS"); do
	echo "-- round $round"
	rows=()
	for k in $LOADS; do
		rows+=("plain/$k /plain $k")
		rows+=("weir-log/$k /log-$k $k")
		[ -z "$BASE" ] || rows+=("base-log/$k /log-$k $k $PORT3")
		[ -z "$CRL" ] || rows+=("crl/$k /log-$k $k $PORT2")
		[ -z "$CRL" ] || rows+=("crl-plain/$k /plain $k $PORT2")
		rows+=("weir-zone/$k /zone $k")
		[ -z "$BASE" ] || rows+=("base-zone/$k /zone $k $PORT3")
		rows+=("weir-policy/$k /policy-$k $k")
		[ -z "$BASE" ] || rows+=("base-policy/$k /policy-$k $k $PORT3")
	done
	if [ $((round % 2)) = 0 ]; then
		for ((i = ${#rows[@]} - 1; i >= 0; i--)); do run ${rows[$i]}; done
	else
		for row in "${rows[@]}"; do run $row; done
	fi
done
medians() { # file → "row median" per row, sorted by row
	sort -k1,1 -k2,2n "$1" | awk '
		{ v[$1] = v[$1] " " $2; n[$1]++ }
		END { for (k in v) { split(substr(v[k], 2), a, " "); print k, a[int((n[k] + 1) / 2)] } }' | sort
}
echo
echo "medians over $ROUNDS round(s):"
medians "$work/results" | awk '
	{ m[$1] = $2; order[NR] = $1 }
	END { for (i = 1; i <= NR; i++) { k = order[i]; split(k, p, "/"); base = (k ~ /^crl/) ? "crl-plain/" : "plain/"
	                     printf "%-22s %10.0f req/s  %.3f of plain Caddy", k, m[k], m[k] / m["plain/" p[2]]
	                     if (k ~ /^crl\//) printf "  (%.3f of its own plain)", m[k] / m[base p[2]]
	                     if (k ~ /^(weir|base)-log/ && ("crl/" p[2]) in m) printf "  (%.2fx caddy-ratelimit)", m[k] / m["crl/" p[2]]
	                     printf "\n" } }'
echo
echo "Caddy CPU per request, medians over $ROUNDS round(s):"
medians "$work/cpu" | awk '
	{ m[$1] = $2; order[NR] = $1 }
	END { for (i = 1; i <= NR; i++) { k = order[i]; split(k, p, "/"); base = (k ~ /^crl/) ? "crl-plain/" : "plain/"
	                     printf "%-22s %8.2f µs  %.3f of its plain Caddy\n", k, m[k], m[k] / m[base p[2]] } }'

# Paired per-round ratios: each row against the plain route of its own Caddy measured in the
# same round, so slow and fast phases of the machine cancel. Mean with a 95 % confidence
# interval (Student's t), which is what decides whether a row is within a few per cent.
paired() { # file [vs-crl] → per-row mean ratio ± CI
	awk -v vs="${2:-}" '
		function t975(df) { # Student t quantile, 0.975
			split("12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 2.120 2.110 2.101 2.093 2.086", t, " ")
			return df <= 20 ? t[df] : 1.96 + 2.4 / df
		}
		{ v[$1, $3] = $2; rows[$1] = 1; if ($3 > nr) nr = $3 }
		END {
			for (k in rows) {
				if (k ~ /plain\//) continue
				split(k, p, "/"); base = (k ~ /^crl/) ? "crl-plain/" p[2] : "plain/" p[2]
				if (vs != "") { if (k !~ /^weir-log/) continue; base = "crl/" p[2] }
				n = 0; s = 0; ss = 0
				for (r = 1; r <= nr; r++) if ((k, r) in v && (base, r) in v && v[base, r] > 0) {
					x = v[k, r] / v[base, r]; n++; s += x; ss += x * x
				}
				if (n == 0) continue
				m = s / n; h = 0
				if (n > 1) { var = (ss - n * m * m) / (n - 1); sd = sqrt(var > 0 ? var : 0); h = t975(n - 1) * sd / sqrt(n) }
				printf "%-22s %.3f ± %.3f  (95 %% CI %.3f–%.3f, %d rounds)\n", k, m, h, m - h, m + h, n
			}
		}' "$1" | sort
}
echo
echo "Caddy CPU per request ÷ its plain Caddy's in the same round (within 5 % when the whole interval is below 1.05):"
paired "$work/cpu"
echo
echo "req/s ÷ its plain Caddy's in the same round (within 5 % when the whole interval is above 0.95):"
paired "$work/results"
if [ -n "$CRL" ]; then
	echo
	echo "req/s of weir's log zone ÷ caddy-ratelimit's in the same round (same zone shape):"
	paired "$work/results" vs-crl
fi

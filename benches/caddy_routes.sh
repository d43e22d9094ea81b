# Sourced by benches/caddy_wrk.sh and benches/caddy_share.sh: the routes both drive, and how
# they start a Caddy. Limits are generous enough that (almost) every request passes: they
# measure the cost of the decision, not of rejections.

# caddy_routes_write DIR PORT ADMIN PORT2 ADMIN2: writes into DIR
#   Caddyfile       weir's Caddy on PORT: /plain, /zone (inline GCRA), /log-hot and /log-churn
#                   (caddy-ratelimit's zone shape), /policy-hot and /policy-churn (policy files)
#   Caddyfile.crl   caddy-ratelimit's Caddy on PORT2: /plain, /log-hot, /log-churn
#   hot.lua, churn.lua  wrk scripts: one X-Key for every request / a random one of a million
caddy_routes_write() {
	local dir=$1 port=$2 admin=$3 port2=$4 admin2=$5
	cat > "$dir/hot.toml" <<'T'
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
	sed -e 's/key = "global"/key = "header:X-Key"/' "$dir/hot.toml" > "$dir/churn.toml"
	# caddy-ratelimit's zone shape (weir's exact sliding log); limits above the offered load
	# (hot: 4096 per 50 ms is 80k req/s; with 100 ms, bursts at 30k req/s were rejected).
	local log_zones='	handle /log-hot {
		LIMITER {
			zone lh {
				key {http.request.header.X-Key}
				events 4096
				window 50ms
				SIZE
			}
		}
		respond "ok"
	}
	handle /log-churn {
		LIMITER {
			zone lc {
				key {http.request.header.X-Key}
				events 10
				window 1s
				SIZE
			}
		}
		respond "ok"
	}'
	local weir_log crl_log
	weir_log=$(sed -e 's/LIMITER/weir/' -e 's/SIZE/size 67108864/' <<<"$log_zones")
	crl_log=$(sed -e 's/LIMITER/rate_limit/' -e '/SIZE/d' <<<"$log_zones")
	cat > "$dir/Caddyfile" <<C
{
	admin 127.0.0.1:$admin
	default_bind 127.0.0.1
	auto_https off
	persist_config off
	log default {
		output discard
	}
}
:$port {
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
$weir_log
	handle /policy-hot {
		weir {
			policy $dir/hot.toml
		}
		respond "ok"
	}
	handle /policy-churn {
		weir {
			policy $dir/churn.toml
		}
		respond "ok"
	}
}
C
	cat > "$dir/Caddyfile.crl" <<C
{
	admin 127.0.0.1:$admin2
	default_bind 127.0.0.1
	auto_https off
	persist_config off
	order rate_limit before respond
	log default {
		output discard
	}
}
:$port2 {
	handle /plain {
		respond "ok"
	}
$crl_log
}
C
	cat > "$dir/hot.lua" <<'L'
wrk.headers["X-Key"] = "hot"
L
	cat > "$dir/churn.lua" <<'L'
math.randomseed(os.time())
request = function()
  wrk.headers["X-Key"] = tostring(math.random(1, 1000000))
  return wrk.format(nil)
end
L
}

# caddy_start BINARY CADDYFILE PORT LOG [COMMAND PREFIX...]: runs the Caddy in the background
# (its pid in $started) and waits until it answers /plain; exits the script if it does not.
caddy_start() {
	local bin=$1 config=$2 port=$3 log=$4
	shift 4
	"$@" "$bin" run --config "$config" --adapter caddyfile > "$log" 2>&1 &
	started=$!
	for _ in $(seq 100); do curl -fs -m 2 -o /dev/null "http://127.0.0.1:$port/plain" 2>/dev/null && break; sleep 0.1; done
	curl -fs -m 2 -o /dev/null "http://127.0.0.1:$port/plain" || { echo "$bin did not start:"; cat "$log"; exit 1; }
}

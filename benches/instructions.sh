#!/usr/bin/env bash
# Instructions per operation under callgrind: exact and independent of machine load, unlike
# wall-clock timings. Each figure is (count at N2 − count at N1) / (N2 − N1), so set-up and
# priming cancel out.
#
#   bash benches/instructions.sh [table] [policy] [tower]     # default: all three
#
#   table   benches/table_instr.rs: GCRA check, `hot` key and `1m` keys (per check)
#   policy  benches/policy_instr.rs: the cases of benches/policy.rs, and the minimal and
#           reject cases with a `ban` (per request)
#   tower   tower/benches/layer_instructions.rs: inner service alone, tower_governor, weir,
#           weir + concurrency (per request; subtract `inner` for a layer's own cost)
#
# Needs valgrind. Builds the bench binaries (cargo bench --no-run) first. TSV=FILE also writes
# "GROUP/CASE<TAB>instructions" lines to FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind missing (apt-get install valgrind)" >&2; exit 1; }

bin() { # $@ = cargo bench arguments; prints the bench binary's path
	cargo bench "$@" --no-run 2>&1 | sed -n 's/.*(\(target[^)]*\)).*/\1/p' | tail -1
}

refs() { # $1 = binary, $2 = case, $3 = iterations; prints total instructions
	valgrind --tool=callgrind --callgrind-out-file=/dev/null ${TOGGLE:+--toggle-collect="$TOGGLE"} "$1" "$2" "$3" 2>&1 |
		sed -n 's/.*refs: *//p' | tr -d ,
}

per() { # $1 = binary, $2 = N1, $3 = N2, $4… = cases (of group $g)
	local b=$1 n1=$2 n2=$3 c lo hi
	shift 3
	for c in "$@"; do
		lo=$(refs "$b" "$c" "$n1")
		hi=$(refs "$b" "$c" "$n2")
		printf '  %-18s %8d\n' "$c" $(((hi - lo) / (n2 - n1)))
		[ -z "${TSV:-}" ] || printf '%s/%s\t%d\n' "$g" "$c" $(((hi - lo) / (n2 - n1))) >>"$TSV"
	done
}

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(table policy tower)
for g in "${groups[@]}"; do
	case $g in
	table)
		echo "table: instructions per check"
		per "$(bin --bench table_instr)" 1000000 2000000 hot 1m
		;;
	policy)
		echo "policy engine: instructions per request (evaluate + release)"
		per "$(bin --bench policy_instr)" 1000 11000 wiki wiki_long_cookie static api mix min min_ban reject reject_no_top_keys reject_banned conc_fixed conc_auto
		;;
	tower)
		echo "tower: instructions per request (request construction and inner service included)"
		TOGGLE='layer_instructions::measure*' per "$(bin -p weir-tower --bench layer_instructions)" 1000 11000 inner governor weir weir-concurrency
		;;
	*)
		echo "instructions.sh: unknown group $g (table, policy, tower)" >&2
		exit 2
		;;
	esac
done

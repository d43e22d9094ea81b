#!/usr/bin/env bash
# weir beside its peers in one table: user-space instructions per request or check under
# callgrind (exact and load-independent, so fit for CI; wall-clock time never is).
#
#   bash benches/compare.sh                   # the table                     (make perf-table)
#   bash benches/compare.sh --check [FILE]    # fail on a case > 10 % over    (make perf-check)
#   bash benches/compare.sh --update [FILE]   # rewrite the budget from today (make perf-budget)
#
# Rows: nginx (`INSTR=1 benches/nginx_wrk.sh`: plain, stock limit_req, weir_req, policy mode
# with 1 and 3 limits; hot key, new key per request, and a flood where every request is
# refused), tower (`benches/instructions.sh tower`: layer overhead = case − inner service),
# the policy engine and the table (`benches/instructions.sh policy table`).
#
# The budget (FILE, default benches/budget.tsv: case<TAB>instructions) covers weir's own
# cases: nginx and tower rows over plain nginx / the inner service (what weir adds, not what
# nginx or the request costs), engine and table cases as measured. Counts depend on the
# toolchain, nginx and libc: rewrite the budget (--update) when one of those changes, or when
# a change costs instructions on purpose, and say why in the commit.
#
# Needs valgrind, Debian's nginx and target/nginx/ngx_http_weir_module.so (make nginx-module);
# the bench binaries are built by cargo bench --no-run. About 3 minutes on 2 cores.
# Env: MODULE (the nginx module), TOLERANCE (10, in %).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=table
budget=benches/budget.tsv
case ${1:-} in
--check | --update)
	mode=${1#--}
	budget=${2:-$budget}
	;;
"") ;;
*)
	echo "usage: bash benches/compare.sh [--check | --update] [BUDGET]" >&2
	exit 2
	;;
esac
[ "$mode" != check ] || [ -f "$budget" ] || {
	echo "compare: no budget $budget (bash benches/compare.sh --update writes it)" >&2
	exit 2
}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
step() { # $1 = what, $2… = command; output kept in $dir/log, shown when it fails
	echo "compare: $1" >&2
	if ! TSV=$dir/figures.tsv "${@:2}" >"$dir/log" 2>&1; then
		cat "$dir/log" >&2
		echo "compare: $1 failed" >&2
		exit 1
	fi
}
t0=$SECONDS
step "nginx, 14 configurations under callgrind" env INSTR=1 bash benches/nginx_wrk.sh ${MODULE:+"$MODULE"}
step "tower, policy engine and table under callgrind" bash benches/instructions.sh tower policy table
echo "compare: measured in $((SECONDS - t0)) s" >&2

python3 - "$dir/figures.tsv" "$mode" "$budget" "${TOLERANCE:-10}" <<'PY'
import os, sys

figures, mode, budget_path, tolerance = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
got = {}
for line in open(figures):
    case, n = line.split("\t")
    got[case] = int(n)

SETS = {"hot": "hot key", "churn": "new key per request", "flood": "every request refused"}
NGINX = {"plain": "plain nginx", "limit_req": "stock limit_req", "weir_req": "weir_req",
         "policy1": "policy mode, 1 limit", "policy3": "policy mode, 3 limits"}
TOWER = {"inner": "inner service", "governor": "tower_governor", "weir": "weir",
         "weir-concurrency": "weir + concurrency"}

rows = []  # (case, label, instructions, over base or None, ratio text, budgeted figure or None)
for s, what in SETS.items():
    base = got[f"nginx/{s}/plain"]
    peer = got[f"nginx/{s}/limit_req"] - base
    for c, label in NGINX.items():
        case = f"nginx/{s}/{c}"
        if case not in got:
            continue
        over = got[case] - base
        if c == "plain":
            label += " (return 503)" if s == "flood" else ""
            rows.append((case, f"nginx, {what}: {label}", got[case], None, "", None))
            continue
        ratio = f"{over / peer:.2f}× limit_req" if c != "limit_req" else ""
        ours = c != "limit_req"
        rows.append((case, f"nginx, {what}: {label}", got[case], over, ratio, over if ours else None))
inner, govn = got["tower/inner"], got["tower/governor"]
gov = govn - inner
for c, label in TOWER.items():
    case = f"tower/{c}"
    over = got[case] - inner
    if c == "inner":
        rows.append((case, f"tower: {label}", got[case], None, "", None))
    elif c == "governor":
        rows.append((case, f"tower: {label}", got[case], over, "", None))
    else:
        rows.append((case, f"tower: {label}", got[case], over,
                     f"overhead {over / gov:.2f}× governor's ({got[case] / govn:.2f}× per request)", over))
for case, n in got.items():
    if case.startswith("policy/"):
        rows.append((case, f"policy engine: {case[7:]}", n, None, "", n))
hot = got["table/hot"]
for c, label in (("hot", "hot key"), ("1m", "1M keys")):
    case = f"table/{c}"
    rows.append((case, f"table: {label}", got[case], None, f"{got[case] / hot:.2f}× hot" if c == "1m" else "", got[case]))
measured = {case: b for case, _, _, _, _, b in rows if b is not None}

budget = {}
if os.path.exists(budget_path):
    for line in open(budget_path):
        if line.strip() and not line.startswith("#"):
            case, n = line.split("\t")
            budget[case] = int(n)
check = mode == "check" or (mode == "table" and budget)

print("user-space instructions per request (table: per check), callgrind")
print("nginx and tower rows: over plain nginx / the inner service; ratios to the peer's figure")
head = f"{'case':<50} {'instructions':>12} {'over base':>10}  {'ratio to the peer':<46}"
if check:
    head += f" {'budget':>8} {'vs budget':>9}"
print(head)
over_budget, missing = [], []
for case, label, n, over, ratio, b in rows:
    line = f"{label:<50} {n:>12,} {'' if over is None else f'{over:+,}':>10}  {ratio:<46}"
    if check and b is not None:
        if case in budget:
            d = (b - budget[case]) / budget[case] * 100
            line += f" {budget[case]:>8,} {d:>+8.1f}%"
            if d > tolerance:
                over_budget.append((case, b, budget[case], d))
        else:
            line += f" {'(none)':>8}"
    print(line.rstrip())
if check:
    print("(budget: nginx and tower rows over plain nginx / the inner service, others as measured)")

# The nginx module's code layout moves every nginx row by up to ±200 instructions per request
# with no change on the request path (docs/PERFORMANCE.md): its budget is written this far above.
LAYOUT = 300

if mode == "update":
    with open(budget_path, "w") as f:
        f.write("# Instruction budget per case (bash benches/compare.sh --check fails on any case more than\n"
                "# 10 % over). nginx and tower rows: instructions over plain nginx / the inner service;\n"
                f"# the others as measured. nginx rows: today's figure + {LAYOUT} (code layout noise).\n"
                "# Rewritten by `make perf-budget` (bash benches/compare.sh --update).\n")
        for case, b in measured.items():
            f.write(f"{case}\t{b + LAYOUT if case.startswith('nginx/') else b}\n")
    print(f"compare: wrote {budget_path} ({len(measured)} cases)")
elif mode == "check":
    missing = [c for c in budget if c not in measured]
    for case, b, limit, d in over_budget:
        print(f"perf-check: {case} is over its budget: {b:,} instructions, budget {limit:,} "
              f"({d:+.1f} %, {tolerance:g} % allowed)")
    for case in missing:
        print(f"perf-check: {case} is in {budget_path} but was not measured")
    if over_budget or missing:
        print("perf-check: FAILED. If the cost is deliberate (or the toolchain, nginx or libc changed), "
              f"rewrite the budget with today's figures, `make perf-budget` (bash benches/compare.sh "
              f"--update), and commit {budget_path} saying why.")
        sys.exit(1)
    print(f"perf-check: all {len(budget)} cases within {tolerance:g} % of {budget_path}")
PY

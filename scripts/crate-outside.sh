#!/usr/bin/env bash
# The crates as a project outside this repository uses them: a throwaway crate in a temporary
# directory (where .cargo/config.toml's +cmpxchg16b does not apply, and no RUSTFLAGS) with
# README.md's dependency lines, patched to this checkout, builds and runs
#   - every Rust example of README.md's "Using the crate" section (wrapped in a main),
#   - tower/examples/axum_service.rs with its policy: real HTTP on 127.0.0.1, a 429 after the
#     burst, the health check exempt, the metrics served read-only (a client's POST reset of
#     its own key refused with 403), key changes on the admin listener only, with an audit line;
#   - crate-outside/shared_region.rs: a MAP_SHARED table is created where cmpxchg16b is
#     lock-free and refused where portable-atomic takes a lock (a second, core-only crate built
#     with --cfg portable_atomic_no_outline_atomics), in-process tables work in both.
# The examples are read from README.md and tower/examples at run time: a stale README fails.
# Builds go to target/outside (CARGO_TARGET_DIR), so reruns only relink.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
target=${OUTSIDE_TARGET_DIR:-$repo/target/outside}
work=$(mktemp -d "${TMPDIR:-/tmp}/weir-outside.XXXXXX")
server=
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
# Nothing from the environment may add target features: the build is what a user gets.
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS \
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS
# No debug info: builds a good share faster, and nothing here is debugged.
export CARGO_PROFILE_DEV_DEBUG=0

# $1: crate directory, $2: package name. Writes Cargo.toml's package part and the patch that
# points README's crates.io names at this checkout (the dependency lines come after).
manifest() {
    mkdir -p "$1/src/bin"
    cat >"$1/Cargo.toml" <<EOF
[package]
name = "$2"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

[patch.crates-io]
weir-ratelimit = { path = "$repo" }
weir-tower = { path = "$repo/tower" }

EOF
    # The repository's tested dependency versions (cargo drops what this crate does not use).
    cp "$repo/Cargo.lock" "$1/Cargo.lock"
}

# The example crate: README's [dependencies] block verbatim, then what the axum example itself
# uses (tower/Cargo.toml's dev-dependencies).
app=$work/app
manifest "$app" weir-outside
python3 - "$repo" "$app" <<'EOF'
import re, sys
repo, app = sys.argv[1], sys.argv[2]
readme = open(f"{repo}/README.md").read()
section = readme.split("\n## Using the crate\n", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
toml = [b for lang, b in blocks if lang == "toml"]
rust = [b for lang, b in blocks if lang == "rust"]
assert len(toml) == 1 and toml[0].startswith("[dependencies]\n"), "README: one [dependencies] block"
assert "weir-ratelimit" in toml[0] and "weir-tower" in toml[0], toml[0]
assert rust, "README: no Rust example under 'Using the crate'"
with open(f"{app}/Cargo.toml", "a") as f:
    f.write(toml[0])
    f.write('axum = { version = "0.8", default-features = false, features = ["tokio", "http1"] }\n'
            'tokio = { version = "1", features = ["macros", "rt-multi-thread", "net"] }\n'
            'bytes = "1"\nfutures-util = { version = "0.3", default-features = false }\n'
            'tracing-subscriber = { version = "0.3", default-features = false, '
            'features = ["fmt", "std"] }\n')
for i, body in enumerate(rust, 1):
    with open(f"{app}/src/bin/readme_{i}.rs", "w") as f:
        f.write("#![allow(unused)]\nfn main() -> Result<(), Box<dyn std::error::Error>> {\n"
                + body + "Ok(())\n}\n")
print(f"README.md: {len(rust)} Rust example(s), dependency lines:\n{toml[0]}", end="")
EOF
mkdir -p "$app/examples"
cp "$repo/tower/examples/axum_service.rs" "$repo/tower/examples/axum_service.toml" "$app/examples/"
# The README's examples read the example policies by relative path (examples/wiki.toml).
mkdir -p "$app/run/examples" && cp "$repo"/examples/*.toml "$app/run/examples/"
cp "$repo/scripts/crate-outside/shared_region.rs" "$app/src/bin/"
echo 'libc = "0.2"' >>"$app/Cargo.toml"

(cd "$app" && CARGO_TARGET_DIR=$target cargo build --quiet --bins --examples)
bin=$target/debug
for b in "$app"/src/bin/readme_*.rs; do
    name=$(basename "$b" .rs)
    echo "$name: run"
    (cd "$app/run" && "$bin/$name")
done
cx16=0
if grep -qw cx16 /proc/cpuinfo; then cx16=1; fi
WEIR_EXPECT_LOCK_FREE=$cx16 "$bin/shared_region"

# The axum example on a free port (its own "listening on" line says which).
"$bin/examples/axum_service" "$app/examples/axum_service.toml" 127.0.0.1:0 127.0.0.1:0 \
    >"$work/server.out" 2>"$work/server.err" &
server=$!
addr=
for _ in $(seq 100); do
    addr=$(sed -n 's|^listening on http://||p' "$work/server.out")
    if [ -n "$addr" ]; then break; fi
    kill -0 "$server" || { echo "axum example exited"; exit 1; }
    sleep 0.1
done
[ -n "$addr" ] || { echo "axum example did not listen within 10 s"; exit 1; }
admin=$(sed -n 's|^key changes on http://\([^/]*\).*|\1|p' "$work/server.out")
python3 - "$addr" "$admin" "$work/server.err" <<'EOF'
import sys, urllib.error, urllib.request
base, admin, err = f"http://{sys.argv[1]}", f"http://{sys.argv[2]}", sys.argv[3]
def get(path, method="GET", url=base):
    req = urllib.request.Request(url + path, method=method, headers={"Weir-Key-Action": "reset"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
statuses = [get("/")[0] for _ in range(40)]
assert statuses[0] == 200 and 429 in statuses, statuses
first = statuses.index(429)
assert first >= 21, f"429 before the burst of 21 was used up: {statuses}"
assert get("/healthz") == (200, "ok\n"), "health check limited"
status, metrics = get("/metrics")
assert status == 200 and "weir_" in metrics, metrics[:300]
# A client resets its own key on the public route: refused, and it stays limited.
reset = "?limit=per-ip&key=127.0.0.1&action=reset"
status, body = get("/metrics" + reset, "POST")
assert status == 403 and "write" in body, (status, body)
assert get("/")[0] == 429, "a refused reset let the client in"
status, body = get("/status" + reset, "POST", admin)
assert status == 200 and '"changed":true' in body, (status, body)
assert get("/")[0] == 200, "the admin listener's reset did not let the client in"
audit = open(err).read()
assert 'resetting key "127.0.0.1" of weir limit "per-ip"' in audit, audit[-2000:]
print(f"axum example: 200 x {first}, then 429 ({statuses.count(429)} of 40); /healthz 200; "
      "/metrics served, its POST reset refused (403); the admin listener's reset audited")
EOF
kill "$server"
wait "$server" 2>/dev/null || true
server=

# Where portable-atomic falls back to its lock: a core-only crate (cheaper to build twice).
lock=$work/lock
manifest "$lock" weir-outside-lock
printf '[dependencies]\nweir-ratelimit = "0.1"\nlibc = "0.2"\n' >>"$lock/Cargo.toml"
cp "$repo/scripts/crate-outside/shared_region.rs" "$lock/src/main.rs"
(cd "$lock" && CARGO_TARGET_DIR=$target/lock \
    RUSTFLAGS="--cfg portable_atomic_no_outline_atomics" cargo build --quiet)
WEIR_EXPECT_LOCK_FREE=0 "$target/lock/debug/weir-outside-lock"
echo "crate-outside: passed"

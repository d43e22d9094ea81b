#!/usr/bin/env bash
# Bounded libFuzzer run on stable Rust, without cargo-fuzz or nightly:
# builds the fuzz target with the sanitizer-coverage instrumentation that
# libfuzzer-sys needs (plain -C flags, all stable) and runs it for SECONDS.
#
#   fuzz/run.sh normalize 60        # run target "normalize" for 60 s
#
# New interesting inputs go to fuzz/corpus/<target>.new/ (not committed; the
# committed seeds in fuzz/corpus/<target>/ are only read); crashes go to
# fuzz/artifacts/<target>/ and make the script exit non-zero.
set -euo pipefail

target="${1:?usage: fuzz/run.sh TARGET SECONDS}"
seconds="${2:?usage: fuzz/run.sh TARGET SECONDS}"
here="$(cd "$(dirname "$0")" && pwd)"
triple="$(rustc -vV | sed -n 's/^host: //p')"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
# --target keeps these flags off build scripts and proc macros.
export RUSTFLAGS="--cfg fuzzing \
 -Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Ctarget-feature=+cmpxchg16b \
 -Cdebug-assertions -Coverflow-checks"

# --locked: a stale fuzz/Cargo.lock fails here instead of being rewritten by a test run.
cargo build --locked --manifest-path "$here/Cargo.toml" --release --target "$triple" --bin "$target"

mkdir -p "$here/corpus/$target" "$here/corpus/$target.new" "$here/artifacts/$target"
exec "$CARGO_TARGET_DIR/$triple/release/$target" \
    -max_total_time="$seconds" \
    -max_len=4096 \
    -print_final_stats=1 \
    -artifact_prefix="$here/artifacts/$target/" \
    "$here/corpus/$target.new" "$here/corpus/$target"

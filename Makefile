# weir — every command CI runs is reachable from here.
#   make demo    the main job: the crawler-incident demo on examples/wiki.toml
#   make test    everything CI runs (formatting, lints, unit/integration/multi-process tests,
#                the nginx differential test, loom models, bounded fuzzing, benchmark builds)
#   make bench   criterion benchmarks (figures go to docs/PERFORMANCE.md)

CARGO ?= cargo
FUZZ_SECONDS ?= 20

.PHONY: setup demo test lint unit loom fuzz bench-build bench

setup:
	@bash scripts/setup.sh

demo: setup
	$(CARGO) run --release --example demo -- examples/wiki.toml

test: setup lint unit loom fuzz bench-build
	@echo "make test: all passed"

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --release
	$(CARGO) test --release -p weir-cli

loom:
	RUSTFLAGS="--cfg loom -C target-feature=+cmpxchg16b" CARGO_TARGET_DIR=target/loom \
		$(CARGO) test --release --test loom

fuzz:
	bash fuzz/run.sh normalize $(FUZZ_SECONDS)
	@if [ -f fuzz/fuzz_targets/policy.rs ]; then bash fuzz/run.sh policy $(FUZZ_SECONDS); fi

bench-build:
	$(CARGO) bench --no-run

bench:
	$(CARGO) bench

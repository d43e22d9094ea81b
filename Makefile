# weir — every command CI runs is reachable from here.
#   make demo    the main job: the crawler incident through nginx + weir on examples/wiki.toml
#   make lib     libweir.a / libweir.so (C ABI); make header regenerates include/weir.h
#   make test    everything CI runs (formatting, lints, unit/integration/multi-process tests,
#                the nginx differential test, loom models, bounded fuzzing, benchmark builds)
#   make bench   criterion benchmarks (figures go to docs/PERFORMANCE.md)

CARGO ?= cargo
FUZZ_SECONDS ?= 20
VECTORS ?= tests/vectors

.PHONY: setup demo demo-engine test lint unit loom fuzz bench-build bench header lib c-test pc \
	nginx-module nginx-module-test nginx-test

CFLAGS_TEST = -std=c11 -Wall -Wextra -Werror -g -Iinclude
NATIVE_LIBS = -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
OUT_HEADER = $$(ls -t target/release/build/weir-ffi-*/out/weir.h | head -1)
# where cargo puts its output (CARGO_TARGET_DIR when set)
CARGO_OUT = $(or $(CARGO_TARGET_DIR),target)
NGX_OUT ?= target/nginx

setup:
	@bash scripts/setup.sh

# The main job: the crawler incident through real nginx with the module and examples/wiki.toml.
demo: setup nginx-module
	python3 scripts/demo_nginx.py target/nginx/ngx_http_weir_module.so examples/wiki.toml

# The same incident through the engine alone (no nginx), one simulated minute.
demo-engine:
	$(CARGO) run --release --example demo -- examples/wiki.toml

test: setup lint unit c-test nginx-test loom fuzz bench-build
	@echo "make test: all passed"

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --release --workspace

loom:
	RUSTFLAGS="--cfg loom -C target-feature=+cmpxchg16b" CARGO_TARGET_DIR=target/loom \
		$(CARGO) test --release --test loom

fuzz:
	bash fuzz/run.sh normalize $(FUZZ_SECONDS)
	@if [ -f fuzz/fuzz_targets/policy.rs ]; then bash fuzz/run.sh policy $(FUZZ_SECONDS); fi

# libweir.a and libweir.so (target/release), and the header cbindgen generates with them.
lib:
	$(CARGO) build --release -p weir-ffi

# Regenerates the committed include/weir.h (ffi/tests/header.rs fails while it is stale).
header: lib
	cp $(OUT_HEADER) include/weir.h

# target/release/weir.pc for pkg-config (PREFIX defaults to /usr/local).
pc: lib
	sed -e 's|@PREFIX@|$(or $(PREFIX),/usr/local)|' -e 's|@VERSION@|0.1.0|' \
		-e 's|@NATIVE_LIBS@|$(NATIVE_LIBS)|' ffi/weir.pc.in > target/release/weir.pc

# The C ABI from C: under ASan+UBSan (static lib) and under valgrind memcheck; the .so must
# export weir_* symbols only, and the static lib must link with --exclude-libs,ALL.
c-test: lib pc
	cmp -s $(OUT_HEADER) include/weir.h || { echo "include/weir.h is stale: run make header"; exit 1; }
	@bad=$$(nm -D --defined-only target/release/libweir.so | awk '{print $$3}' | grep -v '^weir_' || true); \
		if [ -n "$$bad" ]; then echo "libweir.so exports non-weir symbols: $$bad"; exit 1; fi
	mkdir -p target/c
	gcc $(CFLAGS_TEST) -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
		tests/c/test_weir.c target/release/libweir.a -lcjson $(NATIVE_LIBS) -o target/c/test_weir_asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 target/c/test_weir_asan $(VECTORS)
	gcc $(CFLAGS_TEST) tests/c/test_weir.c target/release/libweir.a -lcjson $(NATIVE_LIBS) -o target/c/test_weir
	valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
		target/c/test_weir $(VECTORS)
	gcc -shared -fPIC -o target/c/libwrap.so -Wl,--exclude-libs,ALL -Wl,--no-undefined \
		-Iinclude tests/c/wrap.c target/release/libweir.a $(NATIVE_LIBS)
	@bad=$$(nm -D --defined-only target/c/libwrap.so | awk '{print $$3}' | grep -v '^wrap_' || true); \
		if [ -n "$$bad" ]; then echo "static lib leaked symbols through --exclude-libs,ALL: $$bad"; exit 1; fi
	gcc $(CFLAGS_TEST) tests/c/test_weir.c -Ltarget/release -lweir -lcjson -Wl,-rpath,$(CURDIR)/target/release -o target/c/test_weir_so
	target/c/test_weir_so $(VECTORS)
	gcc $(CFLAGS_TEST) -fsanitize=address,undefined examples/c/limit_requests.c target/release/libweir.a \
		$$(PKG_CONFIG_PATH=target/release pkg-config --libs-only-l --static weir | sed 's/-lweir//') \
		-o target/c/limit_requests
	target/c/limit_requests examples/api.toml

bench-build:
	$(CARGO) bench --no-run
	$(CARGO) bench -p weir-tower --no-run

bench:
	$(CARGO) bench

# The nginx dynamic module for Debian's nginx (needs nginx-dev):
# target/nginx/ngx_http_weir_module.so.  docs/NGINX.md.
nginx-module: lib
	nginx-module/build.sh $(NGX_OUT) $(CARGO_OUT)/release/libweir.a "" "-Wl,--gc-sections -s"

# The same module with test hooks (-DWEIR_TEST_HOOKS: weir_test_clock and
# $weir_test_verdict; never for production), plain and under ASan.
nginx-module-test: lib
	nginx-module/build.sh target/nginx-test $(CARGO_OUT)/release/libweir.a "-DWEIR_TEST_HOOKS=1" ""
	nginx-module/build.sh target/nginx-asan $(CARGO_OUT)/release/libweir.a \
		"-DWEIR_TEST_HOOKS=1 -fsanitize=address -fno-omit-frame-pointer" "-fsanitize=address"

# Real nginx (Debian's /usr/sbin/nginx) with the module: every shared vector in
# policy mode, multi-worker exact counts, SIGKILL, reload, bad configs, ASan.
nginx-test: nginx-module nginx-module-test
	python3 tests/nginx/run.py --module target/nginx/ngx_http_weir_module.so \
		--test-module target/nginx-test/ngx_http_weir_module.so \
		--asan-module target/nginx-asan/ngx_http_weir_module.so --vectors $(VECTORS)

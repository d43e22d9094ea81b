# weir — every command CI runs is reachable from here.
#   make demo    the main job: the crawler incident through nginx + weir on examples/wiki.toml
#   make lib     libweir.a / libweir.so (C ABI); make header regenerates include/weir.h
#   make dist    the Caddy plugin tarball (linux/amd64; make dist-arm64: linux/arm64)
#   make install libweir.a, libweir.so, weir.h, weir.pc under PREFIX (docs/C-API.md)
#   make test    everything CI runs (formatting, lints, unit/integration/multi-process tests,
#                the nginx differential test, loom models, bounded fuzzing, benchmark builds,
#                instruction budgets, the status page in a browser)
#   make bench   criterion benchmarks (figures go to docs/PERFORMANCE.md)
#   make perf-table  weir beside its peers in instructions (callgrind); make perf-check holds
#                them to benches/budget.tsv, make perf-budget rewrites it
#   make contrib-check  the Prometheus alerts and Grafana dashboard in contrib/, checked

CARGO ?= cargo
FUZZ_SECONDS ?= 20
VECTORS ?= tests/vectors

.PHONY: setup demo demo-engine test lint unit loom fuzz bench-build bench header lib c-test pc \
	nginx-module nginx-module-test nginx-test nginx-versions deb deb-test \
	caddy-lib caddy caddy-weirtest promcheck caddy-test caddy-lint caddy-ratelimit caddy-bench \
	dist caddy-dist-test contrib-check

CFLAGS_TEST = -std=c11 -Wall -Wextra -Werror -g -Iinclude
NATIVE_LIBS = -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
# where cargo puts its output (CARGO_TARGET_DIR when set)
CARGO_OUT = $(or $(CARGO_TARGET_DIR),target)
OUT_HEADER = $$(ls -t $(CARGO_OUT)/release/build/weir-ffi-*/out/weir.h | head -1)
NGX_OUT ?= target/nginx

setup:
	@bash scripts/setup.sh

# The main job: the crawler incident through real nginx with the module and examples/wiki.toml.
demo: setup nginx-module
	python3 scripts/demo_nginx.py target/nginx/ngx_http_weir_module.so examples/wiki.toml

# The same incident through the engine alone (no nginx), one simulated minute.
demo-engine:
	$(CARGO) run --release --example demo -- examples/wiki.toml

test: setup lint contrib-check unit crate-outside c-test install-test nginx-test overload-smoke nginx-versions deb-test caddy-test cluster-mixed browser-test loom fuzz \
	bench-build perf-check
	@echo "make test: all passed"

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# WEIR_PROMCHECK: the tower layer's host scenarios check its metrics with it.
unit: promcheck
	WEIR_PROMCHECK=$(CURDIR)/target/caddy/promcheck $(CARGO) test --release --workspace

# The crates as a project outside this repository gets them (no build flags): README.md's
# dependency lines and Rust examples, tower/examples/axum_service.rs over HTTP, and shared
# tables refused where the 16-byte CAS is not lock-free. Builds in target/outside.
.PHONY: crate-outside
crate-outside:
	bash scripts/crate-outside.sh

# Every interleaving with up to 4 preemptions (unbounded takes over 15 minutes since a lookup
# loads a whole 4-slot bucket; 4 takes about 2 minutes on 2 cores).
loom:
	LOOM_MAX_PREEMPTIONS=4 RUSTFLAGS="--cfg loom -C target-feature=+cmpxchg16b" \
		CARGO_TARGET_DIR=target/loom $(CARGO) test --release --test loom --test loom_log

fuzz:
	bash fuzz/run.sh normalize $(FUZZ_SECONDS)
	@if [ -f fuzz/fuzz_targets/policy.rs ]; then bash fuzz/run.sh policy $(FUZZ_SECONDS); fi
	bash fuzz/run.sh keyops $(FUZZ_SECONDS)

# libweir.a and libweir.so (target/release), and the header cbindgen generates with them.
lib:
	$(CARGO) build --release -p weir-ffi

# Regenerates the committed include/weir.h (ffi/tests/header.rs fails while it is stale).
header: lib
	cp $(OUT_HEADER) include/weir.h

# target/release/weir-uninstalled.pc: pkg-config for this tree (PKG_CONFIG_PATH=target/release).
pc: lib
	NATIVE_LIBS="$(NATIVE_LIBS)" bash scripts/install.sh --uninstalled $(CARGO_OUT)/release

# make install [PREFIX=/usr/local] [DESTDIR=] [SPLIT_DEBUG=1]: libweir.a, libweir.so (stripped),
# include/weir.h, lib/pkgconfig/weir.pc (docs/C-API.md).
.PHONY: install install-test
install: lib
	NATIVE_LIBS="$(NATIVE_LIBS)" PREFIX="$(or $(PREFIX),/usr/local)" DESTDIR="$(DESTDIR)" \
		SPLIT_DEBUG="$(SPLIT_DEBUG)" bash scripts/install.sh $(CARGO_OUT)/release

# make install into a temporary prefix; docs/C-API.md's host built with pkg-config from it
# (shared and static) and from the tree, and run.
install-test: lib pc dist-arm64
	ARM64_LIB=$(CURDIR)/target/caddy/linux_arm64/libweir_caddy.a bash tests/c/install_test.sh $(CARGO_OUT)/release

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

# Instructions per request under callgrind (exact, so fit for CI) for nginx (plain, limit_req,
# weir_req, policy mode; hot key, churn, every request refused), tower (vs tower_governor),
# the policy engine and the table, as one table with ratios to the peers (about 3 minutes).
# perf-check also fails when one of weir's cases is more than 10 % over benches/budget.tsv;
# perf-budget rewrites that file from today's figures (commit it saying why).
.PHONY: perf-table perf-check perf-budget
perf-table: nginx-module bench-build
	MODULE=$(NGX_OUT)/ngx_http_weir_module.so bash benches/compare.sh
perf-check: setup nginx-module bench-build
	MODULE=$(NGX_OUT)/ngx_http_weir_module.so bash benches/compare.sh --check
perf-budget: nginx-module bench-build
	MODULE=$(NGX_OUT)/ngx_http_weir_module.so bash benches/compare.sh --update

# The overload harness (benches/overload/README.md): a backend with N slots behind no limiter,
# nginx + weir with a hand-set max, and max = "auto" (also tower's overload_proxy, and Caddy
# when target/caddy/caddy is built); steady overload, capacity changes, a sheddable spike, the
# slot-exhaustion incident. `make overload` runs every scenario (about 30 minutes; QUICK=1:
# 15 s runs) and prints the table; figures go to target/overload/.
.PHONY: overload overload-smoke
overload: nginx-module
	$(CARGO) build --release -p weir-tower --example overload_proxy
	python3 benches/overload/run.py --module $(NGX_OUT)/ngx_http_weir_module.so \
		--tower $(CARGO_OUT)/release/examples/overload_proxy $(if $(QUICK),--quick)

# A few seconds of 2x overload through nginx: health checks all pass, the backend never holds
# more than the limit + 1, refusals come at once, the CSV and SVG are written.
# One cluster concurrency pool shared by nginx, Caddy and a tower service at once, over a real
# redis-server (tests/cluster/mixed_hosts.py; docs/CLUSTER.md).
.PHONY: cluster-mixed
cluster-mixed: nginx-module caddy
	$(CARGO) build --release -p weir-tower --example overload_proxy
	timeout -k 5 120 python3 tests/cluster/mixed_hosts.py --module $(NGX_OUT)/ngx_http_weir_module.so \
		--caddy target/caddy/caddy --tower $(CARGO_OUT)/release/examples/overload_proxy

overload-smoke: nginx-module
	timeout -k 5 60 python3 benches/overload/smoke.py --module $(NGX_OUT)/ngx_http_weir_module.so

# The live status page (?format=html) in headless Chromium (Debian's chromium, chromium-driver
# and python3-selenium: make setup) against real nginx, Caddy and tower hosts
# (tests/browser/dashboard.py): rates, top keys and bans under a crawler, key operations from
# its buttons (and 403 where changes are off), hostile key texts shown as text, its CSP.
# Screenshots go to the test's temporary directory; WEIR_SCREENSHOT_DIR=DIR keeps them too.
.PHONY: browser-test
browser-test: nginx-module caddy
	$(CARGO) build --release -p weir-tower --example overload_proxy
	timeout -k 5 240 python3 tests/browser/dashboard.py --module $(NGX_OUT)/ngx_http_weir_module.so \
		--caddy target/caddy/caddy --tower $(CARGO_OUT)/release/examples/overload_proxy

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

# Real nginx (Debian's /usr/sbin/nginx) with the module: every shared vector and host
# scenario (tests/hosts) in policy mode, multi-worker exact counts, SIGKILL, reload, bad
# configs, ASan.
# nginx's own limit_req*/limit_conn* tests (nginx-tests, BSD; not vendored) run renamed when a
# checkout of them sits next to this repository, as ../shared/nginx-tests, or in NGINX_TESTS.
NGINX_TESTS ?= $(firstword $(wildcard $(CURDIR)/../shared/nginx-tests))

nginx-test: nginx-module nginx-module-test promcheck
	$(CARGO) build --release -p weir-cli
	python3 tests/nginx/run.py --module target/nginx/ngx_http_weir_module.so \
		--test-module target/nginx-test/ngx_http_weir_module.so --promcheck target/caddy/promcheck \
		--asan-module target/nginx-asan/ngx_http_weir_module.so --vectors $(VECTORS) \
		--weir $(CARGO_OUT)/release/weir
	@if [ -n "$(NGINX_TESTS)" ]; then \
		PROVE_FLAGS= bash nginx-module/t/run-nginx-tests.sh "$(NGINX_TESTS)"; \
	else \
		echo "nginx-test: SKIPPED nginx's own limit_req/limit_conn tests: no nginx-tests checkout" \
			"at ../shared/nginx-tests (set NGINX_TESTS=DIR)"; \
	fi

# nginx.org releases from source (nginx-VERSION.tar.gz in ../shared/nginx-src or NGINX_SRC_DIR):
# --with-compat + the module dynamic for each version, --add-module for NGINX_STATIC; the
# project's nginx tests and nginx's own renamed tests on each. Builds: target/nginx-VERSION.
NGINX_SRC_DIR ?= $(firstword $(wildcard $(CURDIR)/../shared/nginx-src))
NGINX_VERSIONS ?= 1.30.4 1.31.4
NGINX_STATIC ?= 1.31.4

nginx-versions: lib promcheck
	$(CARGO) build --release -p weir-cli
	bash nginx-module/t/nginx-versions.sh "$(NGINX_SRC_DIR)" "$(NGINX_TESTS)" "$(NGINX_VERSIONS)" \
		"$(NGINX_STATIC)" $(CARGO_OUT)/release/libweir.a target/caddy/promcheck

# target/deb: libnginx-mod-http-weir (for Debian's nginx) and weir (the CLI), docs/NGINX.md.
deb: nginx-module
	$(CARGO) build --release -p weir-cli
	bash packaging/debian/build.sh target/deb $(NGX_OUT)/ngx_http_weir_module.so $(CARGO_OUT)/release/weir

# Installs both packages on this machine (root), serves a weir-limited site through the stock
# /etc/nginx, then purges them and checks nothing is left.
deb-test: deb
	bash packaging/debian/test.sh target/deb

# ---- Caddy plugin (caddy-plugin/, docs/CADDY.md) ----------------------------------------
# Caddy and xcaddy are pinned; cgo must be on (xcaddy silently drops cgo files without it).
CADDY_VERSION ?= v2.11.9
XCADDY_VERSION ?= v0.4.5
CADDY_MODULE = github.com/weir-rs/weir/caddy-plugin
RUST_TARGET = $(or $(CARGO_TARGET_DIR),target)
XCADDY = $(CURDIR)/target/caddy/bin/xcaddy
# The Go build cache does not hash the archives named in #cgo LDFLAGS: put the library's hash
# into CGO_CFLAGS so that a changed libweir rebuilds the plugin package.
CADDY_ENV = CGO_ENABLED=1 GOFLAGS="$(or $(GOFLAGS),-p=1)" \
	CGO_CFLAGS="-O2 -g -DWEIR_LIB_SHA=$$(sha256sum $(CURDIR)/target/caddy/libweir_caddy.a | cut -c1-16)"

# target/caddy/promcheck: a strict Prometheus text checker (Go's expfmt, what promtool and
# Telegraf parse with) that the nginx and Caddy tests run weir's metrics through.
promcheck:
	cd caddy-plugin && go build -o ../target/caddy/promcheck ./cmd/promcheck

# target/caddy/libweir_caddy.a: libweir.a with every non-weir_* symbol made local; copied with
# weir.h into caddy-plugin/lib/ (gitignored), where cgo.go's ${SRCDIR}-relative paths find
# them, as in the release tarball.
GO_PLATFORM = $(shell go env GOOS)_$(shell go env GOARCH)
caddy-lib: lib
	bash scripts/caddy-lib.sh $(RUST_TARGET)/release/libweir.a target/caddy
	mkdir -p caddy-plugin/lib/$(GO_PLATFORM)
	cp include/weir.h caddy-plugin/lib/weir.h
	cp target/caddy/libweir_caddy.a caddy-plugin/lib/$(GO_PLATFORM)/libweir_caddy.a

$(XCADDY):
	GOBIN=$(CURDIR)/target/caddy/bin go install github.com/caddyserver/xcaddy/cmd/xcaddy@$(XCADDY_VERSION)

# target/caddy/caddy: Caddy $(CADDY_VERSION) + the standard modules + weir, built by xcaddy.
caddy: caddy-lib $(XCADDY)
	$(CADDY_ENV) XCADDY_SKIP_CLEANUP=0 $(XCADDY) build $(CADDY_VERSION) \
		--with $(CADDY_MODULE)@v0.0.0=./caddy-plugin --output target/caddy/caddy
	target/caddy/caddy list-modules | grep -qx 'http.handlers.weir'
	target/caddy/caddy list-modules | grep -qx 'admin.api.weir'
	target/caddy/caddy list-modules | grep -qx 'http.handlers.weir_status'

# target/caddy/caddy-weirtest: the same with the test hooks (-tags weirtest, see
# caddy-plugin/testhook_on.go); built from caddy-plugin/cmd/caddy-weir, not by xcaddy, with
# xcaddy's flags and tags so that the two builds share the Go build cache.
caddy-weirtest: caddy-lib
	cd caddy-plugin && $(CADDY_ENV) go build -trimpath -ldflags "-w -s" -tags weirtest,nobadger,nomysql,nopgx \
		-o ../target/caddy/caddy-weirtest ./cmd/caddy-weir

caddy-lint: caddy-lib
	@out=$$(gofmt -l caddy-plugin); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	cd caddy-plugin && $(CADDY_ENV) go vet ./... && $(CADDY_ENV) go vet -tags weirtest ./...

# target/dist/weir-caddy-VERSION-linux-amd64.tar.gz: the plugin as a Go module with weir.h and
# the prebuilt library, for `xcaddy build --with ...` anywhere (docs/CADDY.md, Install).
WEIR_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' ffi/Cargo.toml)
DIST_TARBALL = target/dist/weir-caddy-$(WEIR_VERSION)-$(subst _,-,$(GO_PLATFORM)).tar.gz
dist: caddy-lib
	bash scripts/caddy-dist.sh caddy-plugin $(WEIR_VERSION) $(GO_PLATFORM) target/dist

# target/dist/weir-caddy-VERSION-linux-arm64.tar.gz: the same for linux/arm64, cross-built
# (Rust's aarch64-unknown-linux-gnu target, Debian's gcc-aarch64-linux-gnu; make setup-arm64).
ARM64_TARGET = aarch64-unknown-linux-gnu
ARM64_TARBALL = target/dist/weir-caddy-$(WEIR_VERSION)-linux-arm64.tar.gz
.PHONY: setup-arm64 dist-arm64 caddy-dist-test-arm64
setup-arm64:
	@bash scripts/setup.sh arm64
dist-arm64: setup-arm64
	CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
		$(CARGO) build --release --target $(ARM64_TARGET) -p weir-ffi
	CROSS=aarch64-linux-gnu- bash scripts/caddy-lib.sh \
		$(RUST_TARGET)/$(ARM64_TARGET)/release/libweir.a target/caddy/linux_arm64
	mkdir -p caddy-plugin/lib/linux_arm64
	cp include/weir.h caddy-plugin/lib/weir.h
	cp target/caddy/linux_arm64/libweir_caddy.a caddy-plugin/lib/linux_arm64/libweir_caddy.a
	bash scripts/caddy-dist.sh caddy-plugin $(WEIR_VERSION) linux_arm64 target/dist

# The arm64 tarball as an arm64 user takes it: Caddy cross-built from it by xcaddy
# (GOARCH=arm64, CC=aarch64-linux-gnu-gcc) and run under qemu-aarch64, a request refused.
caddy-dist-test-arm64: dist-arm64 $(XCADDY)
	GOFLAGS="$(or $(GOFLAGS),-p=1)" GOARCH=arm64 CC=aarch64-linux-gnu-gcc \
		RUN="qemu-aarch64 -L /usr/aarch64-linux-gnu" \
		bash scripts/caddy-dist-test.sh $(ARM64_TARBALL) $(XCADDY) $(CADDY_VERSION)

# The tarball as a user takes it: unpacked outside the repository, Caddy built from it by
# xcaddy, a request refused over real HTTP (reuses the Go build cache of `make caddy`).
caddy-dist-test: dist $(XCADDY)
	GOFLAGS="$(or $(GOFLAGS),-p=1)" bash scripts/caddy-dist-test.sh $(DIST_TARBALL) $(XCADDY) $(CADDY_VERSION)

# Go tests over HTTP on 127.0.0.1 against both binaries (vectors, host scenarios,
# caddy-ratelimit's cases, reloads, load, bad configs), and the release tarball.
caddy-test: caddy caddy-weirtest caddy-lint caddy-dist-test
	cd caddy-plugin && $(CADDY_ENV) WEIR_CADDY=$(CURDIR)/target/caddy/caddy \
		WEIR_CADDY_TEST=$(CURDIR)/target/caddy/caddy-weirtest WEIR_VECTORS=$(CURDIR)/$(VECTORS) \
		WEIR_HOSTS=$(CURDIR)/tests/hosts \
		go test -trimpath -tags weirtest,nobadger,nomysql,nopgx -count=1 -timeout 20m ./...

# target/caddy/caddy-ratelimit: the same Caddy with github.com/mholt/caddy-ratelimit instead of
# weir, the benchmark's peer (the newest version the Go module proxy serves).
CADDY_RATELIMIT_VERSION ?= v0.1.0
caddy-ratelimit: $(XCADDY)
	CGO_ENABLED=1 GOFLAGS="$(or $(GOFLAGS),-p=1)" XCADDY_SKIP_CLEANUP=0 $(XCADDY) build $(CADDY_VERSION) \
		--with github.com/mholt/caddy-ratelimit@$(CADDY_RATELIMIT_VERSION) --output target/caddy/caddy-ratelimit
	target/caddy/caddy-ratelimit list-modules | grep -qx 'http.handlers.rate_limit'

# wrk: plain Caddy vs caddy-ratelimit vs weir (hot key, churn), then weir's share of Caddy's
# CPU from CPU profiles. Figures go to docs/PERFORMANCE.md.
caddy-bench: caddy caddy-ratelimit
	PIN=1 ROUNDS=10 DURATION=3s CADDY_RATELIMIT=target/caddy/caddy-ratelimit bash benches/caddy_wrk.sh
	bash benches/caddy_share.sh

# ---- contrib/: Prometheus alerting rules and Grafana dashboard (contrib/README.md) ---------
# contrib/check (a Go module of its own, so the Caddy plugin's dependencies do not grow) reads
# both with Prometheus's own rule and PromQL parsers and checks every series they select
# against the families docs/METRICS.md lists; its tests evaluate every alert with
# Prometheus's engine on made-up series and break each file on purpose.
# target/contrib/weir-contrib-check checks an edited copy the same way.
contrib-check:
	@out=$$(gofmt -l contrib/check); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	cd contrib/check && go vet . && go test -count=1 .
	cd contrib/check && go build -o ../../target/contrib/weir-contrib-check .
	target/contrib/weir-contrib-check -metrics docs/METRICS.md \
		contrib/prometheus/weir-alerts.yml contrib/grafana/weir-dashboard.json

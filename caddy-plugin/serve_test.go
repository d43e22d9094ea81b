package weir

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// provisioned provisions h outside a running Caddy; the returned func cleans up.
func provisioned(tb testing.TB, h *Handler) func() {
	tb.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	if err := h.Provision(ctx); err != nil {
		cancel()
		tb.Fatal(err)
	}
	return func() { _ = h.Cleanup(); cancel() }
}

var nextOK = caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })

// caddyRequest prepares r as Caddy's HTTP server does (replacer, variables, client_ip).
func caddyRequest(r *http.Request, w http.ResponseWriter) (*http.Request, *caddy.Replacer) {
	repl := caddy.NewReplacer()
	return caddyhttp.PrepareRequest(r, repl, w, nil), repl
}

// Limits far above what a test can send: every request passes.
func logZoneHandler() *Handler {
	return &Handler{RateLimits: map[string]*Zone{"lz": {Key: "{http.request.header.X-Key}",
		MaxEvents: 4096, Window: caddy.Duration(1e6), Size: 64 << 20}}}
}

func gcraZoneHandler() *Handler {
	return &Handler{RateLimits: map[string]*Zone{"z": {Key: "{http.request.header.X-Key}",
		Rate: "1000000r/s", Burst: 100000, Size: 64 << 20}}}
}

func policyHandler(tb testing.TB) *Handler { return policyHandlerFor(tb, benchPolicy) }

// policyHandlerFor is a handler whose policy file holds text.
func policyHandlerFor(tb testing.TB, text string) *Handler {
	p := tb.TempDir() + "/p.toml"
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		tb.Fatal(err)
	}
	return &Handler{Policy: p}
}

// TestPassAllocations: a request that passes a zone or the policy allocates only its
// placeholder record (the record and the provider function handed to Caddy's replacer) beyond
// what Caddy's own request set-up allocates.
func TestPassAllocations(t *testing.T) {
	w := httptest.NewRecorder()
	r0 := httptest.NewRequest("GET", "/x", nil)
	r0.Header.Set("X-Key", "k")
	r0.Header.Set("X-Ip", "2001:db8:1:2::7")
	base := testing.AllocsPerRun(200, func() {
		r, _ := caddyRequest(r0, w)
		_ = nextOK.ServeHTTP(w, r)
	})
	// A key masked to its network (caddy-ratelimit's prefixes on another key than {client_ip}).
	masked := &Handler{RateLimits: map[string]*Zone{"m": {Key: "{http.request.header.X-Ip}",
		Rate: "1000000r/s", Burst: 100000, IPv4Prefix: 24, IPv6Prefix: 64}}}
	// A concurrency zone: its permits go back with a latency sample and the status.
	conc := &Handler{RateLimits: map[string]*Zone{"c": {Key: "{http.request.header.X-Key}", Max: 100000}}}
	for name, h := range map[string]*Handler{"log zone": logZoneHandler(), "gcra zone": gcraZoneHandler(),
		"masked key zone": masked, "concurrency zone": conc, "policy": policyHandler(t)} {
		t.Run(name, func(t *testing.T) {
			defer provisioned(t, h)()
			got := testing.AllocsPerRun(200, func() {
				r, _ := caddyRequest(r0, w)
				if err := h.ServeHTTP(w, r, nextOK); err != nil {
					t.Fatal(err)
				}
			})
			if got-base > 2 {
				t.Errorf("a passing request allocates %v objects in weir, want at most 2", got-base)
			}
		})
	}
}

// TestPlaceholders: {http.weir.status} and {http.weir.limit} reach Caddy's replacer, and a
// second weir handler of the same request replaces the first one's values.
func TestPlaceholders(t *testing.T) {
	pass := logZoneHandler()
	defer provisioned(t, pass)()
	strict := &Handler{RateLimits: map[string]*Zone{"one": {Key: "k", MaxEvents: 1, Window: caddy.Duration(3.6e12)}}}
	defer provisioned(t, strict)()
	w := httptest.NewRecorder()
	r, repl := caddyRequest(httptest.NewRequest("GET", "/", nil), w)
	if err := pass.ServeHTTP(w, r, nextOK); err != nil {
		t.Fatal(err)
	}
	if got := repl.ReplaceAll("{http.weir.status}/{http.weir.limit}", "-"); got != "pass/-" {
		t.Errorf("after a pass: %q", got)
	}
	if err := strict.ServeHTTP(w, r, nextOK); err != nil {
		t.Fatal(err)
	}
	if err := strict.ServeHTTP(w, r, nextOK); err == nil {
		t.Fatal("the second request through a 1-event zone passed")
	}
	if got := repl.ReplaceAll("{http.weir.status}/{http.weir.limit}", "-"); got != "reject/one" {
		t.Errorf("after a rejection by a second handler: %q", got)
	}
}

// TestZoneKeys: a compiled key expands to what Caddy's replacer gives for the same template.
func TestZoneKeys(t *testing.T) {
	templates := []string{
		"{http.request.header.X-Key}", "{http.request.header.x-key}", "{http.request.header.X-Absent}",
		"{http.request.header.Multi}", "{http.vars.client_ip}", "{http.vars.absent}", "{http.vars.n}",
		"{http.request.remote.host}", "{http.request.uri.path}", "static", "", "a-{http.request.header.X-Key}",
		"{http.request.header.X-Key}{http.request.header.X-Key}", `\{http.request.header.X-Key}`, "{",
	}
	reqs := []func() *http.Request{
		func() *http.Request {
			r := httptest.NewRequest("GET", "/p/q", nil)
			r.Header.Set("X-Key", "v1")
			r.Header.Add("Multi", "a")
			r.Header.Add("Multi", "b")
			return r
		},
		func() *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "[2001:db8::7]:443"
			return r
		},
		func() *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "/run/caddy.sock"
			return r
		},
		func() *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.TLS = &tls.ConnectionState{HandshakeComplete: false}
			return r
		},
	}
	for i, mk := range reqs {
		r, repl := caddyRequest(mk(), httptest.NewRecorder())
		caddyhttp.SetVar(r.Context(), caddyhttp.ClientIPVarKey, "198.51.100."+strconv.Itoa(i))
		caddyhttp.SetVar(r.Context(), "n", 42)
		for _, tmpl := range templates {
			k := compileKey(tmpl)
			if got, want := k.expand(r, repl), repl.ReplaceAll(tmpl, ""); got != want {
				t.Errorf("request %d, key %q (kind %d): %q, Caddy's replacer gives %q", i, tmpl, k.kind, got, want)
			}
		}
	}
	for tmpl, kind := range map[string]keyKind{"{http.request.header.X-Key}": keyHeader, "{http.vars.client_ip}": keyVar,
		"{http.request.remote.host}": keyRemoteHost, "static": keyConst, "{http.request.uri.path}": keyReplacer} {
		if k := compileKey(tmpl); k.kind != kind {
			t.Errorf("%q compiles to kind %d, want %d", tmpl, k.kind, kind)
		}
	}
}

func benchServe(b *testing.B, h *Handler, keys int) {
	defer provisioned(b, h)()
	reqs := make([]*http.Request, 1024)
	w := httptest.NewRecorder()
	for i := range reqs {
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("X-Key", strconv.Itoa(i%keys))
		reqs[i] = r
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, _ := caddyRequest(reqs[i&1023], w)
		if err := h.ServeHTTP(w, r, nextOK); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServeBaseline: Caddy's request set-up alone (subtract it from the others).
func BenchmarkServeBaseline(b *testing.B) {
	w := httptest.NewRecorder()
	r0 := httptest.NewRequest("GET", "/x", nil)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r, _ := caddyRequest(r0, w)
		_ = nextOK.ServeHTTP(w, r)
	}
}

// BenchmarkServeLogZone: ServeHTTP with one log zone keyed by a header, one hot key.
func BenchmarkServeLogZone(b *testing.B) { benchServe(b, logZoneHandler(), 1) }

// BenchmarkServeGCRAZone: ServeHTTP with one GCRA zone keyed by a header, 1024 keys.
func BenchmarkServeGCRAZone(b *testing.B) { benchServe(b, gcraZoneHandler(), 1024) }

// BenchmarkServePolicy: ServeHTTP with a policy (GCRA per client address).
func BenchmarkServePolicy(b *testing.B) { benchServe(b, policyHandler(b), 1024) }

// TestRateOnlyPolicyHoldsNoPermits: a policy with rate limits only leaves nothing to release
// when the request ends. (Concurrency permits held while the next handler runs and given back
// when the request completes: tests/hosts/queue-timeout-and-leave.)
func TestRateOnlyPolicyHoldsNoPermits(t *testing.T) {
	rs := reqStates.Get().(*reqState)
	defer reqStates.Put(rs)
	h2 := policyHandler(t)
	defer provisioned(t, h2)()
	w := httptest.NewRecorder()
	r, _ := caddyRequest(httptest.NewRequest("GET", "/x", nil), w)
	env := reqEnv{now: nowNS()}
	if _, _, err := h2.serveEngine(w, r, nil, &env, rs, engPolicy); err != nil {
		t.Fatal(err)
	}
	if rs.held[engPolicy] != nil {
		t.Fatal("a rate-only policy left permits to release")
	}
}

// TestBanLoggedOnce: a limit's ban is logged once, at the limit's log_level, with its key
// as the status names it; the requests refused during the ban log no further ban line.
func TestBanLoggedOnce(t *testing.T) {
	h := policyHandlerFor(t, `
[zones.z]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[[limit]]
name = "login"
class = "*"
zone = "z"
key = "global"
log_level = "warn"
ban = { after = 2, within = "1m", duration = "10m" }
`)
	defer provisioned(t, h)()
	core, logs := observer.New(zapcore.InfoLevel)
	h.logger = zap.New(core)
	var got []int
	for i := 0; i < 5; i++ {
		w := httptest.NewRecorder()
		r, _ := caddyRequest(httptest.NewRequest("GET", "/", nil), w)
		status := http.StatusOK
		if err := h.ServeHTTP(w, r, nextOK); err != nil {
			var he caddyhttp.HandlerError
			if !errors.As(err, &he) {
				t.Fatalf("request %d: %v", i, err)
			}
			status = he.StatusCode
		}
		got = append(got, status)
	}
	// 1r/m, no burst: one passes; the second rejection starts the ban, the rest are banned.
	if fmt.Sprint(got) != "[200 429 429 429 429]" {
		t.Fatalf("statuses %v", got)
	}
	bans := logs.FilterMessageSnippet("banning key").All()
	if len(bans) != 1 {
		t.Fatalf("%d ban lines: %v", len(bans), logs.All())
	}
	b := bans[0]
	if b.Message != `banning key "global" for 600s by weir limit "login"` || b.Level != zapcore.WarnLevel {
		t.Errorf("ban line %q at %v", b.Message, b.Level)
	}
	if b.ContextMap()["limit"] != "login" {
		t.Errorf("ban line fields %v", b.ContextMap())
	}
	// The rejection that started the ban, then the two refusals of the banned key.
	var msgs []string
	for _, e := range logs.FilterMessageSnippet("rate limit exceeded").All() {
		msgs = append(msgs, fmt.Sprintf("%s banned=%v", e.Message, e.ContextMap()["banned"]))
	}
	if want := "[rate limit exceeded banned=<nil> rate limit exceeded banned=<nil> " +
		"rate limit exceeded (banned key) banned=true rate limit exceeded (banned key) banned=true]"; fmt.Sprint(msgs) != want {
		t.Errorf("rejection lines %v", msgs)
	}
}

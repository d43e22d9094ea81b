package weir

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// keyAnswerOf is what the tests read of a key operation's answer.
type keyAnswerOf struct {
	Limit       string
	Key         string
	Remaining   int
	RetryAfterS int `json:"retry_after_s"`
	Banned      bool
	Changed     bool
	Error       string
}

// adminKey sends method /weir/status?query to a: the status, the decoded answer and the raw
// body (a HEAD's is empty). A POST names its action in Weir-Key-Action, as weir key does.
func adminKey(t *testing.T, a *AdminStatus, method, query string) (int, keyAnswerOf, string) {
	t.Helper()
	h := http.Header{}
	if q, _ := url.ParseQuery(query); method == http.MethodPost && q.Get("action") != "" {
		h.Set("Weir-Key-Action", q.Get("action"))
	}
	return adminKeyWith(t, a, method, query, h)
}

// adminKeyWith is adminKey with the request's headers h.
func adminKeyWith(t *testing.T, a *AdminStatus, method, query string, h http.Header) (int, keyAnswerOf, string) {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(method, "/weir/status?"+query, nil)
	for k, v := range h {
		r.Header[k] = v
	}
	if err := a.serveStatus(w, r); err != nil {
		t.Fatalf("%s ?%s: %v", method, query, err)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s ?%s: Content-Type %q", method, query, ct)
	}
	var ans keyAnswerOf
	if method != http.MethodHead {
		if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
			t.Fatalf("%s ?%s: %v: %s", method, query, err, w.Body)
		}
	}
	return w.Code, ans, w.Body.String()
}

// TestAdminKeyOperations: /weir/status with a key argument inspects a key (GET, HEAD),
// resets it and lifts its ban (POST), each change logged once at the limit's log_level with
// the limit, the key and the admin client; after a reset or an unban the key's next request
// passes. Bad queries answer 400, an unknown limit 404, a change without POST 405.
func TestAdminKeyOperations(t *testing.T) {
	reset := policyHandlerFor(t, "[zones.r]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n"+
		"[[limit]]\nname = \"keys-reset\"\nclass = \"*\"\nzone = \"r\"\nlog_level = \"warn\"\n")
	defer provisioned(t, reset)()
	// 5r/s: the bucket refills in 200 ms, so only the ban refuses the key after that. Its
	// log_level is the default, error.
	ban := policyHandlerFor(t, "[zones.b]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"5r/s\"\n"+
		"[[limit]]\nname = \"keys-ban\"\nclass = \"*\"\nzone = \"b\"\n"+
		"ban = { after = 1, within = \"1m\", duration = \"10m\" }\n")
	defer provisioned(t, ban)()
	core, logs := observer.New(zapcore.DebugLevel)
	a := &AdminStatus{logger: zap.New(core)}
	defer enableWrites(t)()

	const client = "192.0.2.7"
	if s1, s2 := sendFrom(t, reset, client), sendFrom(t, reset, client); s1 != 200 || s2 != 429 {
		t.Fatalf("statuses %d, %d; want 200, 429", s1, s2)
	}
	code, ans, body := adminKey(t, a, "GET", "limit=keys-reset&key="+client)
	if code != 200 || ans.Limit != "keys-reset" || ans.Key != client || ans.Remaining != 0 ||
		ans.RetryAfterS <= 0 || ans.Banned || ans.Changed {
		t.Fatalf("inspect: %d %s", code, body)
	}
	if code, _, body := adminKey(t, a, "HEAD", "limit=keys-reset&key="+client); code != 200 || body != "" {
		t.Fatalf("HEAD: %d %q", code, body)
	}
	if logs.Len() != 0 {
		t.Fatalf("inspecting logged %v", logs.All())
	}
	code, ans, body = adminKey(t, a, "POST", "limit=keys-reset&key="+client+"&action=reset")
	if code != 200 || !ans.Changed || ans.Remaining != 1 {
		t.Fatalf("reset: %d %s", code, body)
	}
	if s := sendFrom(t, reset, client); s != 200 {
		t.Fatalf("after the reset: %d", s)
	}
	checkAudit(t, logs, zapcore.WarnLevel, `resetting key "192.0.2.7" of weir limit "keys-reset"`, "keys-reset", client)

	const banned = "198.51.100.4"
	if s1, s2 := sendFrom(t, ban, banned), sendFrom(t, ban, banned); s1 != 200 || s2 != 429 {
		t.Fatalf("statuses %d, %d; want 200, 429", s1, s2)
	}
	time.Sleep(300 * time.Millisecond)
	if s := sendFrom(t, ban, banned); s != 429 {
		t.Fatalf("banned key: %d", s)
	}
	if code, ans, body := adminKey(t, a, "GET", "limit=keys-ban&key="+banned); code != 200 || !ans.Banned {
		t.Fatalf("inspect the ban: %d %s", code, body)
	}
	code, ans, body = adminKey(t, a, "POST", "limit=keys-ban&key="+banned+"&action=unban")
	if code != 200 || !ans.Changed || ans.Banned {
		t.Fatalf("unban: %d %s", code, body)
	}
	if s := sendFrom(t, ban, banned); s != 200 {
		t.Fatalf("after the unban: %d", s)
	}
	checkAudit(t, logs, zapcore.ErrorLevel, `lifting ban of key "198.51.100.4" of weir limit "keys-ban"`, "keys-ban", banned)

	for _, c := range []struct {
		method, query string
		status        int
	}{
		{"GET", "key=" + client, 400},                                 // no limit
		{"POST", "limit=keys-reset&key=" + client, 400},               // no action
		{"POST", "limit=keys-reset&key=" + client + "&action=x", 400}, // unknown action
		{"GET", "limit=keys-reset&key=not-an-address", 400},           // not a key of the limit
		{"GET", "limit=nope&key=" + client, 404},
		{"GET", "limit=keys-reset&key=" + client + "&action=reset", 405},
		{"DELETE", "limit=keys-reset&key=" + client, 405},
	} {
		code, ans, body := adminKey(t, a, c.method, c.query)
		if code != c.status || ans.Error == "" {
			t.Errorf("%s ?%s: %d %s, want %d and an error", c.method, c.query, code, body, c.status)
		}
	}
	if logs.Len() != 0 {
		t.Fatalf("refused operations logged %v", logs.All())
	}
	// Without a key argument the status itself: GET and HEAD only.
	if err := a.serveStatus(httptest.NewRecorder(), httptest.NewRequest("POST", "/weir/status?limit=keys-reset", nil)); err == nil {
		t.Fatal("POST of the status accepted")
	}
}

// checkAudit checks the last log entry: one audit line of a change, at level, with its
// limit, key and the admin client's address; then forgets the entries.
func checkAudit(t *testing.T, logs *observer.ObservedLogs, level zapcore.Level, msg, limit, key string) {
	t.Helper()
	all := logs.TakeAll()
	if len(all) != 1 {
		t.Fatalf("%d log entries, want 1: %v", len(all), all)
	}
	e := all[0]
	f := e.ContextMap()
	if e.Level != level || e.Message != msg || f["limit"] != limit || f["key"] != key ||
		!strings.HasPrefix(f["remote_addr"].(string), "192.0.2.1:") {
		t.Fatalf("audit entry %v %q %v", e.Level, e.Message, f)
	}
}

// enableWrites starts a weir app with status_write, as a config with the global option
// `weir { status_write }` does; the returned func stops it.
func enableWrites(t *testing.T) func() {
	t.Helper()
	app := &App{StatusWrite: true}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	return func() { _ = app.Stop() }
}

// TestAdminKeyWritesOffByDefault: without the weir app's status_write, /weir/status inspects
// keys but refuses POST reset and unban with 403 (saying how to enable them) and changes
// nothing; with it, a cross-site form POST and a POST without Weir-Key-Action are refused
// the same way, and a change sent on purpose goes through. The Caddyfile global option
// `weir { status_write }` adapts to the app, and a reload's old app stopping after the new
// one started leaves writes on.
func TestAdminKeyWritesOffByDefault(t *testing.T) {
	h := policyHandlerFor(t, "[zones.w]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n"+
		"[[limit]]\nname = \"keys-write\"\nclass = \"*\"\nzone = \"w\"\n")
	defer provisioned(t, h)()
	core, logs := observer.New(zapcore.DebugLevel)
	a := &AdminStatus{logger: zap.New(core)}
	const client = "192.0.2.9"
	if s1, s2 := sendFrom(t, h, client), sendFrom(t, h, client); s1 != 200 || s2 != 429 {
		t.Fatalf("statuses %d, %d; want 200, 429", s1, s2)
	}
	if statusWrite() {
		t.Fatal("writes on without the weir app")
	}
	q := "limit=keys-write&key=" + client
	if code, ans, body := adminKey(t, a, "GET", q); code != 200 || ans.Remaining != 0 {
		t.Fatalf("inspect: %d %s", code, body)
	}
	for _, action := range []string{"reset", "unban"} {
		code, ans, body := adminKey(t, a, "POST", q+"&action="+action)
		if code != 403 || !strings.Contains(ans.Error, "status_write") {
			t.Fatalf("POST %s without status_write: %d %s", action, code, body)
		}
	}
	if s := sendFrom(t, h, client); s != 429 {
		t.Fatalf("a refused reset let the key pass: %d", s)
	}

	stop := enableWrites(t)
	defer stop()
	form := http.Header{
		"Origin":         {"http://evil.example"},
		"Sec-Fetch-Site": {"cross-site"},
		"Content-Type":   {"application/x-www-form-urlencoded"},
	}
	withHeader := form.Clone()
	withHeader.Set("Weir-Key-Action", "reset")
	for _, hdr := range []http.Header{form, withHeader, {}} {
		if code, _, body := adminKeyWith(t, a, "POST", q+"&action=reset", hdr); code != 403 {
			t.Fatalf("POST with %v: %d %s", hdr, code, body)
		}
	}
	if s := sendFrom(t, h, client); s != 429 {
		t.Fatalf("a refused reset let the key pass: %d", s)
	}
	if logs.Len() != 0 {
		t.Fatalf("refused changes logged %v", logs.All())
	}
	if code, ans, body := adminKey(t, a, "POST", q+"&action=reset"); code != 200 || !ans.Changed {
		t.Fatalf("reset with status_write: %d %s", code, body)
	}
	if s := sendFrom(t, h, client); s != 200 {
		t.Fatalf("after the reset: %d", s)
	}

	// A reload: the new config's app starts, then the old one stops.
	next := &App{StatusWrite: true}
	_ = next.Start()
	stop()
	if !statusWrite() {
		t.Fatal("the old app's Stop turned writes off")
	}
	_ = next.Stop()
	if statusWrite() {
		t.Fatal("writes on after the last app stopped")
	}

	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte("{\n\tweir {\n\t\tstatus_write\n\t}\n}\n"), nil)
	if err != nil || !strings.Contains(string(adapted), `"weir":{"status_write":true}`) {
		t.Fatalf("global option: %v %s", err, adapted)
	}
	if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte("{\n\tweir {\n\t\tbogus\n\t}\n}\n"), nil); err == nil {
		t.Fatal("an unknown weir global option adapted")
	}
}

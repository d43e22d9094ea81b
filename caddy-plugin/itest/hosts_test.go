package itest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// The host conformance scenarios (tests/hosts/*.toml, see its README) through a real Caddy
// (the weirtest build: a peer that is no address forces an evaluation to fail), weir in front
// of a reverse proxy to an upstream that holds tagged requests, over TCP and a unix socket.

const hostName = "caddy"

type scenario struct {
	Description string            `toml:"description"`
	Policy      string            `toml:"policy"`
	Skip        map[string]string `toml:"skip"`
	Step        []hostStep        `toml:"step"`
	Policies    map[string]string `toml:"policies"`
}

type hostStep struct {
	Request string                      `toml:"request"`
	Via     string                      `toml:"via"`
	Headers [][]string                  `toml:"headers"`
	Fail    bool                        `toml:"fail"`
	Hold    string                      `toml:"hold"`
	Expect  hostExpect                  `toml:"expect"`
	Finish  string                      `toml:"finish"`
	Leave   string                      `toml:"leave"`
	AfterMs int                         `toml:"after_ms"`
	Reload  string                      `toml:"reload"`
	Refused bool                        `toml:"refused"`
	Metrics map[string]map[string]int64 `toml:"metrics"`
	Status  *statusWant                 `toml:"status"`
	Log     []logEntry                  `toml:"log"`
	Key     *keyOp                      `toml:"key"`
	Skip    map[string]string           `toml:"skip"`
	// answer: a key step's expect, the JSON answer's fields as the scenario gives them.
	answer map[string]any
}

// statusWant is a status step: one limit's top keys (last minute) and bans in the JSON
// status, as sets; a nil list is not checked.
type statusWant struct {
	Limit   string    `toml:"limit"`
	TopKeys *[]string `toml:"top_keys"`
	Bans    *[]string `toml:"bans"`
}

// keyOp is a key operation on the host's JSON status endpoint (Caddy: the admin API's
// /weir/status): inspect, reset or unban key Key of limit Limit.
type keyOp struct {
	Limit  string `toml:"limit"`
	Key    string `toml:"key"`
	Action string `toml:"action"`
}

type hostExpect struct {
	Status  int               `toml:"status"`
	MinMs   int64             `toml:"min_ms"`
	Queued  bool              `toml:"queued"`
	Headers map[string]string `toml:"headers"`
	Absent  []string          `toml:"absent"`
}

type logEntry struct {
	Limit  string `toml:"limit" json:"limit"`
	Level  string `toml:"level" json:"level"`
	Client string `toml:"client" json:"client_ip"`
	DryRun bool   `toml:"dry_run" json:"dry_run"`
}

// hostsCfg: key steps change keys, so the admin API's /weir/status has writes enabled.
const hostsCfg = `%GLOBALS_WRITE%
http://:%PORT% {
	bind 127.0.0.1 unix/%DIR%/s.sock
	weir {
		policy %DIR%/policy.toml
	}
	reverse_proxy %UP%
}
`

// holder is the upstream: a request with X-Hold waits until its tag is released.
type holder struct {
	mu      sync.Mutex
	seen    map[string]bool
	release map[string]chan struct{}
}

func (h *holder) gate(tag string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.release[tag] == nil {
		h.release[tag] = make(chan struct{})
	}
	return h.release[tag]
}

func (h *holder) admitted(tag string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[tag]
}

func (h *holder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if tag := r.Header.Get("X-Hold"); tag != "" {
		gate := h.gate(tag)
		h.mu.Lock()
		h.seen[tag] = true
		h.mu.Unlock()
		select {
		case <-gate:
		case <-r.Context().Done():
		}
	}
	io.WriteString(w, "ok")
}

func loadScenarios(t *testing.T) map[string]scenario {
	dir := os.Getenv("WEIR_HOSTS")
	if dir == "" {
		dir = "../../tests/hosts"
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.toml"))
	if len(files) < 8 {
		t.Fatalf("found %d scenarios in %s; expected at least 8", len(files), dir)
	}
	out := map[string]scenario{}
	for _, f := range files {
		var sc scenario
		md, err := toml.DecodeFile(f, &sc)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// A key step's expect names fields of the JSON answer: kept as they are.
		var raw struct {
			Step []struct {
				Expect map[string]any `toml:"expect"`
			} `toml:"step"`
		}
		if _, err := toml.DecodeFile(f, &raw); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		answerFields := map[string]bool{}
		for i := range sc.Step {
			if sc.Step[i].Key != nil {
				sc.Step[i].answer = raw.Step[i].Expect
				for k := range raw.Step[i].Expect {
					answerFields["step.expect."+k] = true
				}
			}
		}
		var unknown []string
		for _, k := range md.Undecoded() {
			if !answerFields[k.String()] {
				unknown = append(unknown, k.String())
			}
		}
		// A scenario Caddy skips may use steps this runner does not know.
		if _, skipped := sc.Skip[hostName]; !skipped && len(unknown) > 0 {
			t.Fatalf("%s: unknown keys %v", f, unknown)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".toml")] = sc
	}
	return out
}

func TestHosts(t *testing.T) {
	bin := binary(t, "WEIR_CADDY_TEST")
	up := &holder{seen: map[string]bool{}, release: map[string]chan struct{}{}}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	all := loadScenarios(t)
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		sc := all[name]
		t.Run(name, func(t *testing.T) {
			if why, ok := sc.Skip[hostName]; ok {
				t.Skip(why)
			}
			runScenario(t, bin, name, sc, up, strings.TrimPrefix(srv.URL, "http://"))
		})
	}
}

func runScenario(t *testing.T, bin, name string, sc scenario, up *holder, upAddr string) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.toml")
	writeFile(t, dir, "policy.toml", sc.Policy)
	cfg := strings.NewReplacer("%DIR%", dir, "%UP%", upAddr).Replace(hostsCfg)
	s := startCaddy(t, bin, "caddyfile", cfg)
	held := map[string]*pending{}
	t.Cleanup(func() {
		for _, p := range held {
			p.conn.Close()
		}
	})
	for i, st := range sc.Step {
		where := fmt.Sprintf("step %d", i)
		if why, ok := st.Skip[hostName]; ok {
			t.Logf("%s skipped: %s", where, why)
			continue
		}
		switch {
		case st.Request != "":
			network, addr := "tcp", fmt.Sprintf("127.0.0.1:%d", s.port)
			if st.Via == "unix" {
				network, addr = "unix", filepath.Join(dir, "s.sock")
			}
			var hs [][2]string
			for _, h := range st.Headers {
				hs = append(hs, [2]string{h[0], h[1]})
			}
			if st.Fail {
				hs = append(hs, [2]string{"X-Weir-Test-Peer", "not-an-address"})
			}
			if st.Hold == "" {
				sent := time.Now()
				r, err := retried(network, addr, st.Request, hs)
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				checkResponse(t, where, r, st.Expect)
				if took := time.Since(sent); took.Milliseconds() < st.Expect.MinMs {
					t.Errorf("%s: answered after %v", where, took)
				}
				continue
			}
			tag := name + ":" + st.Hold
			p, err := sendOn(network, addr, "GET", st.Request, append(hs, [2]string{"X-Hold", tag}))
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			held[st.Hold] = p
			wait := 5 * time.Second
			if st.Expect.Queued {
				wait = 100 * time.Millisecond
			}
			switch got := settle(p, up, tag, wait); {
			case st.Expect.Queued && got != "":
				t.Fatalf("%s: expected queued, got %s (%d)", where, got, p.resp.status)
			case st.Expect.Queued:
			case got == "admitted":
				if st.Expect.Status != 200 {
					t.Fatalf("%s: admitted, want %d", where, st.Expect.Status)
				}
			case got == "":
				t.Fatalf("%s: no answer", where)
			default:
				checkResponse(t, where, p.resp, st.Expect)
			}
		case st.Finish != "":
			tag := name + ":" + st.Finish
			p := held[st.Finish]
			delete(held, st.Finish)
			if settle(p, up, tag, 10*time.Second) == "admitted" {
				close(up.gate(tag))
				<-p.done
			}
			if p.err != nil {
				t.Fatalf("%s: %v", where, p.err)
			}
			checkResponse(t, where, p.resp, st.Expect)
		case st.Leave != "":
			held[st.Leave].conn.Close()
			delete(held, st.Leave)
			time.Sleep(time.Duration(st.AfterMs) * time.Millisecond)
		case st.Reload != "":
			text := sc.Policies[st.Reload]
			if st.Reload == "policy" {
				text = sc.Policy
			}
			if err := os.WriteFile(policy, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			if code, body := s.load("caddyfile", cfg); (code == 200) == st.Refused {
				t.Fatalf("%s: config load answered %d %s (refused: %v)", where, code, body, st.Refused)
			}
		case st.Metrics != nil:
			// The engine's own family, as nginx's weir_status and the tower layer serve it.
			want := map[string]float64{}
			for limit, verdicts := range st.Metrics {
				for verdict, n := range verdicts {
					want[fmt.Sprintf("weir_limit_requests_total{limit=%q,verdict=%q}", limit, verdict)] = float64(n)
				}
			}
			checkSamples(t, where, s.samples(), want)
		case st.Status != nil:
			checkStatus(t, where, s, *st.Status)
		case st.Log != nil:
			var got []logEntry
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if got = rejections(s.Logs()); len(got) >= len(st.Log) {
					break
				}
			}
			if !reflect.DeepEqual(got, st.Log) {
				t.Errorf("%s: rejections logged %+v, want %+v", where, got, st.Log)
			}
		case st.Key != nil:
			checkKeyOp(t, where, s.admin, st.Key, st.answer)
		default:
			t.Fatalf("%s: no request, finish, leave, reload, metrics, status, log or key", where)
		}
	}
	s.assertAlive()
}

// checkStatus reads the admin API's JSON status (GET /weir/status) and checks a status step.
func checkStatus(t *testing.T, where string, s *server, want statusWant) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/weir/status", s.admin))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	defer resp.Body.Close()
	type keyed struct {
		Key string `json:"key"`
	}
	var status struct {
		Limits []struct {
			Name string `json:"name"`
			Last struct {
				Keys []keyed `json:"keys"`
			} `json:"last_1m"`
			Bans []keyed `json:"bans"`
		} `json:"limits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: /weir/status answered %d: %v", where, resp.StatusCode, err)
	}
	sorted := func(list []keyed) []string {
		out := []string{}
		for _, k := range list {
			out = append(out, k.Key)
		}
		sort.Strings(out)
		return out
	}
	for _, l := range status.Limits {
		if l.Name != want.Limit {
			continue
		}
		for _, c := range []struct {
			what string
			want *[]string
			got  []keyed
		}{{"top keys", want.TopKeys, l.Last.Keys}, {"bans", want.Bans, l.Bans}} {
			if c.want == nil {
				continue
			}
			w := append([]string{}, *c.want...)
			sort.Strings(w)
			if got := sorted(c.got); !reflect.DeepEqual(got, w) {
				t.Errorf("%s: %s of %s: %q, want %q", where, c.what, want.Limit, got, w)
			}
		}
		return
	}
	t.Errorf("%s: no limit %s in the status", where, want.Limit)
}

// retried is tryRequestOn, again while a config load switches servers under it.
func retried(network, addr, target string, hs [][2]string) (r response, err error) {
	for i := 0; i < 20; i++ {
		if r, err = tryRequestOn(network, addr, "GET", target, hs); err == nil {
			return r, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r, err
}

// settle waits up to wait for p to reach the upstream ("admitted") or be answered
// ("answered"); "" when neither happened.
func settle(p *pending, up *holder, tag string, wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if up.admitted(tag) {
			return "admitted"
		}
		select {
		case <-p.done:
			return "answered"
		case <-time.After(5 * time.Millisecond):
		}
	}
	return ""
}

func checkResponse(t *testing.T, where string, r response, e hostExpect) {
	t.Helper()
	if r.status != e.Status {
		t.Errorf("%s: status %d, want %d", where, r.status, e.Status)
	}
	for k, want := range e.Headers {
		if got := r.header.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %s = %q, want %q", where, k, got, want)
		}
	}
	for _, k := range e.Absent {
		if got := r.header.Values(k); len(got) > 0 {
			t.Errorf("%s: unexpected %s = %q", where, k, got)
		}
	}
}

// rejections are Caddy's "rate limit exceeded" log entries (and those of dry-run limits), in
// order.
func rejections(logs string) []logEntry {
	var out []logEntry
	for _, line := range strings.Split(logs, "\n") {
		var e struct {
			Msg string `json:"msg"`
			logEntry
		}
		if json.Unmarshal([]byte(line), &e) == nil && (e.Msg == "rate limit exceeded" || e.Msg == "rate limit exceeded (dry run)") {
			out = append(out, e.logEntry)
		}
	}
	return out
}

// checkKeyOp runs a key operation on the admin API's /weir/status (GET to inspect, POST to
// reset or unban) and checks the answer's status and fields.
func checkKeyOp(t *testing.T, where string, admin int, op *keyOp, expect map[string]any) {
	t.Helper()
	q := url.Values{"limit": {op.Limit}, "key": {op.Key}}
	method := "GET"
	if op.Action != "" && op.Action != "inspect" {
		method = "POST"
		q.Set("action", op.Action)
	}
	req, _ := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d/weir/status?%s", admin, q.Encode()), nil)
	if method == "POST" {
		req.Header.Set("Weir-Key-Action", op.Action)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ans map[string]any
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatalf("%s: %s ?%s answered %d %q: %v", where, method, q.Encode(), resp.StatusCode, body, err)
	}
	want := int64(http.StatusOK)
	if s, ok := expect["status"].(int64); ok {
		want = s
	}
	if int64(resp.StatusCode) != want {
		t.Fatalf("%s: %s ?%s answered %d %s, want %d", where, method, q.Encode(), resp.StatusCode, body, want)
	}
	if e, _ := ans["error"].(string); want != http.StatusOK && e == "" {
		t.Errorf("%s: a %d answer without an error: %s", where, want, body)
	}
	// Every other field: the answer's value exactly, or at least NAME_min's.
	for k, v := range expect {
		if k == "status" {
			continue
		}
		if name, ok := strings.CutSuffix(k, "_min"); ok {
			got, _ := ans[name].(float64)
			if _, present := ans[name]; !present || got < float64(v.(int64)) {
				t.Errorf("%s: %s = %v, want at least %v (%s)", where, name, ans[name], v, body)
			}
			continue
		}
		if n, isInt := v.(int64); isInt {
			v = float64(n) // JSON numbers decode as float64
		}
		if !reflect.DeepEqual(ans[k], v) {
			t.Errorf("%s: %s = %v, want %v (%s)", where, k, ans[k], v, body)
		}
	}
}

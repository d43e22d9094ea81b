package itest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

type vector struct {
	Name   string `json:"name"`
	Policy string `json:"policy"`
	Steps  []step `json:"steps"`
}

type step struct {
	TMs     uint64            `json:"t_ms"`
	Method  string            `json:"method"`
	Target  string            `json:"target"`
	Peer    string            `json:"peer"`
	Headers [][2]string       `json:"headers"`
	Vars    map[string]string `json:"vars"`
	Select  []string          `json:"select"`
	Release *int              `json:"release"`
	// RespStatus is the status the response has when released (the harness charges with it).
	RespStatus *int    `json:"response_status"`
	Retry      *int    `json:"retry"`
	Abandon    *int    `json:"abandon"`
	Expect     *expect `json:"expect"`
}

type expect struct {
	Action  string                     `json:"action"`
	Status  *int                       `json:"status"`
	Limit   *json.RawMessage           `json:"limit"`
	WaitMs  *uint64                    `json:"wait_ms"`
	DryRun  *json.RawMessage           `json:"dry_run"`
	Headers map[string]json.RawMessage `json:"headers"`
}

func loadVectors(t *testing.T) []vector {
	dir := os.Getenv("WEIR_VECTORS")
	if dir == "" {
		dir = "../../tests/vectors"
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(files)
	if len(files) < 70 {
		t.Fatalf("found %d vectors in %s; expected at least 70", len(files), dir)
	}
	var vs []vector
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v vector
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		vs = append(vs, v)
	}
	return vs
}

// respStatus is the response status of step i's request (a retry's is its request's; 200
// when the vector gives none).
func respStatus(steps []step, i int) int {
	for steps[i].Retry != nil {
		i = *steps[i].Retry
	}
	if s := steps[i].RespStatus; s != nil {
		return *s
	}
	return 200
}

// nullableString decodes a JSON string or null ("" for null).
func nullableString(raw *json.RawMessage) string {
	var s *string
	_ = json.Unmarshal(*raw, &s)
	if s == nil {
		return ""
	}
	return *s
}

// TestVectors replays every shared vector over HTTP against caddy-weirtest: one Caddy, one
// route per vector (selected by X-Weir-Test-Vector), each with its own policy file and engine.
func TestVectors(t *testing.T) {
	bin := binary(t, "WEIR_CADDY_TEST")
	vs := loadVectors(t)
	dir := t.TempDir()
	var cf strings.Builder
	cf.WriteString("%GLOBALS%\n:%PORT% {\n")
	for i, v := range vs {
		if unsupported(v) != "" {
			continue // skipped below
		}
		p := filepath.Join(dir, v.Name+".toml")
		if err := os.WriteFile(p, []byte(v.Policy), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&cf, "\t@v%d header X-Weir-Test-Vector %s\n\thandle @v%d {\n\t\tweir {\n\t\t\tpolicy %s\n\t\t}\n\t\trespond 200\n\t}\n", i, v.Name, i, p)
	}
	cf.WriteString("\trespond \"no vector\" 404\n}\n")
	s := startCaddy(t, bin, "caddyfile", cf.String())

	checked := 0
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			if why := unsupported(v); why != "" {
				t.Skip(why)
			}
			for i, st := range v.Steps {
				id := fmt.Sprintf("%s/%d", v.Name, i)
				ctl := [][2]string{{"X-Weir-Test-Vector", v.Name}, {"X-Weir-Test-Now", strconv.FormatUint(st.TMs, 10)},
					{"X-Weir-Test-Step", id}}
				var r response
				switch {
				case st.Release != nil:
					ctl = append(ctl, [2]string{"X-Weir-Test-Release", fmt.Sprintf("%s/%d", v.Name, *st.Release)},
						[2]string{"X-Weir-Test-Status", strconv.Itoa(respStatus(v.Steps, *st.Release))})
					if r = get(t, s.port, "/", ctl...); r.status != 204 {
						t.Fatalf("step %d: release answered %d", i, r.status)
					}
					continue
				case st.Abandon != nil:
					ctl = append(ctl, [2]string{"X-Weir-Test-Abandon", fmt.Sprintf("%s/%d", v.Name, *st.Abandon)})
					if r = get(t, s.port, "/", ctl...); r.status != 204 {
						t.Fatalf("step %d: abandon answered %d", i, r.status)
					}
					continue
				case st.Retry != nil:
					ctl = append(ctl, [2]string{"X-Weir-Test-Retry", fmt.Sprintf("%s/%d", v.Name, *st.Retry)})
					r = get(t, s.port, "/", ctl...)
				default:
					ctl = append(ctl, [2]string{"X-Weir-Test-Peer", st.Peer})
					r = rawRequest(t, s.port, st.Method, st.Target, append(ctl, st.Headers...))
				}
				if st.Expect != nil {
					checkStep(t, i, st, r)
					checked++
				}
			}
		})
	}
	t.Logf("%d vectors, %d expectations checked over HTTP", len(vs), checked)
}

func checkStep(t *testing.T, i int, st step, r response) {
	t.Helper()
	e := st.Expect
	what := fmt.Sprintf("step %d (%s %s)", i, st.Method, st.Target)
	action := r.header.Get("X-Weir-Test-Action")
	if e.Action == "bad_request" {
		// Go's HTTP server answers some invalid targets itself before any handler runs.
		if r.status != 400 || (action != "" && action != "bad_request") {
			t.Errorf("%s: want bad_request/400, got %q/%d", what, action, r.status)
		}
		return
	}
	if action != e.Action {
		t.Errorf("%s: action %q, want %q (status %d, body %q)", what, action, e.Action, r.status, r.body)
	}
	if e.Status != nil && r.status != *e.Status {
		t.Errorf("%s: status %d, want %d", what, r.status, *e.Status)
	}
	if e.Limit != nil {
		if got, want := r.header.Get("X-Weir-Test-Limit"), nullableString(e.Limit); got != want {
			t.Errorf("%s: limit %q, want %q", what, got, want)
		}
	}
	if e.WaitMs != nil {
		if got := r.header.Get("X-Weir-Test-Wait-Ms"); got != strconv.FormatUint(*e.WaitMs, 10) {
			t.Errorf("%s: wait_ms %q, want %d", what, got, *e.WaitMs)
		}
	}
	if e.DryRun != nil {
		if got, want := r.header.Get("X-Weir-Test-Dry-Run"), nullableString(e.DryRun); got != want {
			t.Errorf("%s: dry_run %q, want %q", what, got, want)
		}
	}
	for name, raw := range e.Headers {
		want := nullableString(&raw)
		vals := r.header.Values(name)
		switch {
		case string(raw) == "null" && len(vals) > 0:
			t.Errorf("%s: header %s = %q, want absent", what, name, vals)
		case string(raw) != "null" && (len(vals) != 1 || vals[0] != want):
			t.Errorf("%s: header %s = %q, want %q", what, name, vals, want)
		}
	}
}

// unsupported says why the plugin cannot run vector v yet ("" when it can): it supplies no
// values for a policy's var: key parts and selects no limits itself (select steps).
func unsupported(v vector) string {
	for _, st := range v.Steps {
		if st.Vars != nil {
			return "the plugin supplies no values for var: key parts in policy mode"
		}
		if st.Select != nil {
			return "the plugin selects no host limits of a policy (select steps)"
		}
	}
	return ""
}

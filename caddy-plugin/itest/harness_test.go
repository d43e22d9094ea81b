// Package itest runs the built Caddy binaries (target/caddy/caddy and caddy-weirtest) on
// 127.0.0.1 high ports and talks HTTP to them. `make caddy-test` sets the paths.
package itest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/weir-rs/weir/caddy-plugin/promcheck"
)

func binary(t *testing.T, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Fatalf("%s is not set (run through `make caddy-test`)", env)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return p
}

// writeFile writes text to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// freePort returns a currently free 127.0.0.1 port.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// server is one running Caddy.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	port   int
	admin  int
	dir    string
	mu     sync.Mutex
	logs   bytes.Buffer
	exited chan struct{}
}

func (s *server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.Write(p)
}

func (s *server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// globals is the Caddyfile global block every test config starts with.
func globals(admin int) string {
	return fmt.Sprintf("{\n\tadmin 127.0.0.1:%d\n\tdefault_bind 127.0.0.1\n\tauto_https off\n\tpersist_config off\n\tgrace_period 1s\n}\n", admin)
}

// writeGlobals is globals with key changes enabled on the admin API's /weir/status.
func writeGlobals(admin int) string {
	return strings.Replace(globals(admin), "\n}\n", "\n\tweir {\n\t\tstatus_write\n\t}\n}\n", 1)
}

// startCaddy writes config (with %PORT% / %ADMIN% / %DIR% substituted) and runs bin on it.
func startCaddy(t *testing.T, bin, adapter, config string) *server {
	t.Helper()
	s := &server{t: t, port: freePort(t), admin: freePort(t), dir: t.TempDir()}
	name := "Caddyfile"
	if adapter == "json" {
		name = "caddy.json"
	}
	path := filepath.Join(s.dir, name)
	if err := os.WriteFile(path, []byte(s.subst(config)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--config", path}
	if adapter != "json" {
		args = append(args, "--adapter", adapter)
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = s.dir
	s.cmd.Env = append(os.Environ(), "HOME="+s.dir, "XDG_DATA_HOME="+s.dir, "XDG_CONFIG_HOME="+s.dir)
	s.cmd.Stdout, s.cmd.Stderr = s, s
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	exited := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(exited) }()
	s.exited = exited
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return s
		}
		select {
		case <-exited:
			t.Fatalf("caddy exited:\n%s", s.Logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy did not start listening on %d:\n%s", s.port, s.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) subst(config string) string {
	r := strings.NewReplacer("%PORT%", fmt.Sprint(s.port), "%ADMIN%", fmt.Sprint(s.admin), "%DIR%", s.dir,
		"%GLOBALS%", globals(s.admin), "%GLOBALS_WRITE%", writeGlobals(s.admin))
	return r.Replace(config)
}

// assertAlive fails the test if Caddy exited or logged a panic.
func (s *server) assertAlive() {
	s.t.Helper()
	select {
	case <-s.exited:
		s.t.Fatalf("caddy exited:\n%s", s.Logs())
	default:
	}
	if strings.Contains(s.Logs(), "panic") {
		s.t.Fatalf("caddy logged a panic:\n%s", s.Logs())
	}
}

func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// reload posts a new config to the admin API (/load), as `caddy reload` does.
func (s *server) reload(adapter, config string) {
	s.t.Helper()
	if code, body := s.load(adapter, config); code != 200 {
		s.t.Fatalf("reload: %d %s", code, body)
	}
}

// load posts a config to the admin API (/load); the status and body of the answer. Caddy
// reloads even an unchanged config (a policy file it names may have changed).
func (s *server) load(adapter, config string) (int, string) {
	s.t.Helper()
	ct := "text/caddyfile"
	if adapter == "json" {
		ct = "application/json"
	}
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/load", s.admin), strings.NewReader(s.subst(config)))
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Cache-Control", "must-revalidate")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// metrics reads the admin /metrics; the test fails unless it is valid Prometheus text.
func (s *server) metrics() []byte {
	s.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", s.admin))
	if err != nil {
		s.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		s.t.Fatalf("admin /metrics answered %d: %s", resp.StatusCode, body)
	}
	if err := promcheck.Check(body); err != nil {
		s.t.Fatalf("admin /metrics is not valid Prometheus text: %v", err)
	}
	return body
}

// samples reads the admin /metrics into the value of each weir_* series, keyed as
// `name{label="value",...}` with the labels sorted (no braces without labels).
func (s *server) samples() map[string]float64 {
	s.t.Helper()
	return s.samplesOf("weir_")
}

// samplesOf is samples for the families whose names start with prefix.
func (s *server) samplesOf(prefix string) map[string]float64 {
	s.t.Helper()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(s.metrics()))
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			out[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// checkSamples fails the test for each series of want whose value differs in got.
func checkSamples(t *testing.T, where string, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: %s = %v (present %v), want %v", where, k, g, ok, v)
		}
	}
}

// response is what rawRequest read.
type response struct {
	status int
	header http.Header
	body   string
}

// rawRequest sends one HTTP/1.1 request with the target exactly as given (no client-side
// normalisation) and header lines in order, on a new connection.
func rawRequest(t *testing.T, port int, method, target string, headers [][2]string) response {
	t.Helper()
	r, err := tryRequest(port, method, target, headers)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	return r
}

// getAfterReload retries a GET that meets a connection the old config's server closed while
// a reload switched servers (the request is then not answered by either).
func getAfterReload(t *testing.T, port int, path string) response {
	t.Helper()
	var err error
	for i := 0; i < 20; i++ {
		var r response
		if r, err = tryRequest(port, "GET", path, nil); err == nil {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("GET %s after reload: %v", path, err)
	return response{}
}

func tryRequest(port int, method, target string, headers [][2]string) (response, error) {
	return tryRequestOn("tcp", fmt.Sprintf("127.0.0.1:%d", port), method, target, headers)
}

// tryRequestOn is tryRequest to any address ("unix", a socket path; "tcp", host:port).
func tryRequestOn(network, addr, method, target string, headers [][2]string) (response, error) {
	p, err := sendOn(network, addr, method, target, headers)
	if err != nil {
		return response{}, err
	}
	defer p.conn.Close()
	<-p.done
	return p.resp, p.err
}

// pending is a request sent: its connection and, once done is closed, its response.
type pending struct {
	conn net.Conn
	done chan struct{}
	resp response
	err  error
}

// sendOn writes one HTTP/1.1 request (the target exactly as given, header lines in order) on
// a new connection and reads the response in the background.
func sendOn(network, addr, method, target string, headers [][2]string) (*pending, error) {
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, target)
	hasHost := false
	for _, h := range headers {
		if strings.EqualFold(h[0], "host") {
			hasHost = true
		}
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	if !hasHost {
		b.WriteString("Host: 127.0.0.1\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		c.Close()
		return nil, err
	}
	p := &pending{conn: c, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			p.err = err
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		p.resp, p.err = response{resp.StatusCode, resp.Header, string(body)}, err
	}()
	return p, nil
}

func get(t *testing.T, port int, path string, headers ...[2]string) response {
	t.Helper()
	return rawRequest(t, port, "GET", path, headers)
}

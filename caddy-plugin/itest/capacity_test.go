package itest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Capacity through a real Caddy (lanes and the queue's hand-over: the host scenarios
// lanes.toml and queue-hand-over.toml, TestHosts).

const capacityCfg = `%GLOBALS%
http://:%PORT% {
	weir {
		policy %DIR%/policy.toml
	}
	reverse_proxy %UP%
}
`

const capacityPolicy = `[zones.b]
size = "64k"
algorithm = "concurrency"
max = 64
[[limit]]
name = "backend"
class = "*"
zone = "b"
key = "global"
`

const (
	upstreamTime = 100 * time.Millisecond
	clientPause  = 400 * time.Millisecond
	// More than the loopback socket buffers hold: Caddy's copy waits for the client.
	bigBody = 8 << 20
)

// slowReader sends GET / on a connection with a small receive buffer, reads the response head,
// pauses, then reads the body; how long the whole response took.
func slowReader(addr string) (time.Duration, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8192)
		})
		return err
	}}
	start := time.Now()
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	time.Sleep(clientPause)
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && (resp.StatusCode != 200 || n != bigBody) {
		err = fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
	}
	return time.Since(start), err
}

// Behind reverse_proxy, the permits go back with the upstream's time (100 ms until its
// response head), not with the time slow clients took to read a large body (over 400 ms
// each): the JSON status's latency is the upstream's.
func TestSampledLatencyIsTheUpstreams(t *testing.T) {
	bin := binary(t, "WEIR_CADDY_TEST")
	body := make([]byte, bigBody)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(upstreamTime)
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, _ = w.Write(body)
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	writeFile(t, dir, "policy.toml", capacityPolicy)
	cfg := strings.NewReplacer("%DIR%", dir, "%UP%", strings.TrimPrefix(up.URL, "http://")).Replace(capacityCfg)
	s := startCaddy(t, bin, "caddyfile", cfg)
	addr := fmt.Sprintf("127.0.0.1:%d", s.port)
	// Rounds of 8 at once: a latency window closes after 100 ms with 8 samples.
	var slowest, fastest time.Duration
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				took, err := slowReader(addr)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("round %d: %v", round, err)
				}
				slowest = max(slowest, took)
				if fastest == 0 || took < fastest {
					fastest = took
				}
			}()
		}
		wg.Wait()
	}
	if fastest < clientPause {
		t.Fatalf("a response took %v, less than the client's pause: the client was not slow", fastest)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/weir/status", s.admin))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var status struct {
		Limits []struct {
			Name     string `json:"name"`
			Capacity struct {
				Latency  float64 `json:"latency_ms"`
				InFlight int     `json:"in_flight"`
			} `json:"capacity"`
		} `json:"limits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil || len(status.Limits) != 1 {
		t.Fatalf("status: %v %+v", err, status)
	}
	c := status.Limits[0].Capacity
	t.Logf("latency_ms %.1f; responses took %v to %v", c.Latency, fastest, slowest)
	up100 := float64(upstreamTime.Milliseconds())
	if c.Latency < up100 || c.Latency > up100+float64(clientPause.Milliseconds())/2 {
		t.Errorf("latency_ms %.1f, want the upstream's %v (the clients took %v or more)", c.Latency, upstreamTime, fastest)
	}
	if c.InFlight != 0 {
		t.Errorf("in_flight %d after every response", c.InFlight)
	}
	s.assertAlive()
}

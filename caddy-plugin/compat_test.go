package weir

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// Jitter stretches Retry-After by up to jitter·wait, never less than the wait.
func TestJittered(t *testing.T) {
	if got := jittered(30, 0); got != 30 {
		t.Errorf("no jitter: %d", got)
	}
	seen := map[int64]bool{}
	for i := 0; i < 2000; i++ {
		got := jittered(10, 0.5)
		if got < 10 || got > 15 {
			t.Fatalf("jitter 0.5 of 10 s: %d, want 10..15", got)
		}
		seen[got] = true
	}
	if len(seen) < 4 {
		t.Errorf("jitter 0.5 of 10 s gave only %v", seen)
	}
}

// The handler-wide options are checked: a distributed block needs a Redis server (the
// message says what to add), jitter is bounded, a distributed zone's window at least 1 s.
func TestValidateCompat(t *testing.T) {
	zone := func(w time.Duration) map[string]*Zone {
		return map[string]*Zone{"z": {Key: "k", MaxEvents: 4, Window: caddy.Duration(w)}}
	}
	for _, c := range []struct {
		h    *Handler
		want string
	}{
		{&Handler{RateLimits: zone(time.Minute), Distributed: &Distributed{}}, "add `redis redis://HOST:6379/0` inside distributed { }"},
		{&Handler{RateLimits: zone(time.Minute), Jitter: -1}, "jitter must be between 0 and 10"},
		{&Handler{RateLimits: zone(time.Minute), Jitter: 11}, "jitter must be between 0 and 10"},
		{&Handler{RateLimits: zone(500 * time.Millisecond), Distributed: &Distributed{Redis: "redis://127.0.0.1:1/0"}}, "window must be at least 1s"},
		{&Handler{RateLimits: zone(time.Minute), Distributed: &Distributed{Redis: "redis://127.0.0.1:1/0", ExpectedNodes: 5}}, "events (4) must be at least expected_nodes (5)"},
		{&Handler{RateLimits: zone(time.Minute), StorageRaw: []byte(`"x"`)}, "storage must be a storage module object"},
	} {
		err := c.h.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.h, err, c.want)
		}
	}
	ok := &Handler{RateLimits: zone(time.Minute), Jitter: 0.2, SweepInterval: caddy.Duration(time.Minute),
		StorageRaw:  []byte(`{"module": "file_system", "root": "/tmp"}`),
		Distributed: &Distributed{Redis: "redis://127.0.0.1:1/0", PurgeAge: caddy.Duration(time.Hour)}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// A distributed handler's events + window zones become cluster sliding zones syncing every
// min(read, write) interval within 10 ms … window/4; other zones stay local. The policy text
// is what the engine parses.
func TestClusterPolicy(t *testing.T) {
	d := &Distributed{Redis: "redis://127.0.0.1:6379/0", Password: `p"w`, ReadInterval: caddy.Duration(5 * time.Second),
		WriteInterval: caddy.Duration(2 * time.Second), ExpectedNodes: 2}
	var zones []*inlineZone
	for _, c := range []struct {
		name string
		z    *Zone
	}{
		{"api", &Zone{Key: "{http.request.header.X-K}", MaxEvents: 100, Window: caddy.Duration(4 * time.Second)}},
		{"ip", &Zone{Key: "{http.vars.client_ip}", MaxEvents: 10, Window: caddy.Duration(time.Hour), IPv6Prefix: 56, Status: 503}},
		{"g", &Zone{Key: "k", Rate: "5r/m", Burst: 2}},
		{"c", &Zone{Key: "k", Max: 2, Queue: 1, Timeout: caddy.Duration(time.Second)}},
		{"gs", &Zone{Key: "k", Rate: "50r/s", Scope: "cluster"}},
		{"cs", &Zone{Key: "k", Max: 30, Scope: "cluster"}},
	} {
		p, err := zoneParamsOf(c.name, c.z)
		if err != nil {
			t.Fatal(err)
		}
		zones = append(zones, &inlineZone{name: c.name, params: d.clusterParams(p, c.z.Scope)})
	}
	text := zonesPolicy(zones)
	for _, want := range []string{
		"[zones.\"api\"]\nsize = 1048576\nalgorithm = \"sliding\"\nevents = 100\nwindow = \"4000ms\"\nscope = \"cluster\"\n" +
			"redis = \"redis://127.0.0.1:6379/0\"\npassword = \"p\\\"w\"\nsync_interval = \"1000ms\"\nexpected_nodes = 2\n",
		"sync_interval = \"2000ms\"", // the hour-long zone: min(read, write)
		"[zones.\"g\"]\nsize = 1048576\nalgorithm = \"gcra\"\nrate = \"5r/m\"\n[zones.\"c\"]",
		// scope cluster: shared too, syncing at most every 5 s
		"algorithm = \"gcra\"\nrate = \"50r/s\"\nscope = \"cluster\"\n",
		"algorithm = \"concurrency\"\nmax = 30\nscope = \"cluster\"\n",
		"key = \"ip\"\nlog_level = \"info\"\nstatus = 503\nipv4_prefix = 32\nipv6_prefix = 56\n",
		"burst = 2\nnodelay = true\n",
		"queue = 1\ntimeout = \"1000ms\"\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("policy lacks %q:\n%s", want, text)
		}
	}
	if err := checkPolicy([]byte(text), "distributed zones"); err != nil {
		t.Fatalf("the generated policy does not parse: %v\n%s", err, text)
	}
}

// A distributed block reaches Redis Cluster, Sentinels and TLS as the policy does: the
// Caddyfile's `redis URL URL…`, redis_mode, sentinel_master and the TLS files become the
// zone's policy settings, which the engine checks.
func TestDistributedTopologies(t *testing.T) {
	file := "weir {\n\tzone z {\n\t\tkey k\n\t\tevents 10\n\t\twindow 1m\n\t}\n\tdistributed {\n" +
		"\t\tredis redis://10.0.0.1:7000 redis://10.0.0.2:7000\n\t\tredis_mode cluster\n\t\texpected_nodes 2\n\t}\n}\n"
	var h Handler
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(file)); err != nil {
		t.Fatal(err)
	}
	d := h.Distributed
	if d.Redis != "redis://10.0.0.1:7000" || len(d.RedisNodes) != 1 || d.RedisMode != "cluster" {
		t.Fatalf("parsed %+v", d)
	}
	policyOf := func(d *Distributed) string {
		p, err := zoneParamsOf("z", &Zone{Key: "k", MaxEvents: 10, Window: caddy.Duration(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return zonesPolicy([]*inlineZone{{name: "z", params: d.clusterParams(p, "")}})
	}
	text := policyOf(d)
	want := "redis = [\"redis://10.0.0.1:7000\", \"redis://10.0.0.2:7000\"]\nredis_mode = \"cluster\"\n"
	if !strings.Contains(text, want) {
		t.Errorf("policy lacks %q:\n%s", want, text)
	}
	if err := checkPolicy([]byte(text), "distributed zones"); err != nil {
		t.Errorf("cluster: %v\n%s", err, text)
	}
	sentinel := &Distributed{Redis: "redis://10.0.0.1:26379", RedisNodes: []string{"redis://10.0.0.2:26379"},
		RedisMode: "sentinel", SentinelMaster: "mymaster", ExpectedNodes: 2}
	if err := checkPolicy([]byte(policyOf(sentinel)), "distributed zones"); err != nil {
		t.Errorf("sentinel: %v", err)
	}
	// The engine's checks reach Caddy: a missing master name, a relative CA path.
	for _, c := range []struct {
		d    *Distributed
		want string
	}{
		{&Distributed{Redis: "redis://a:26379", RedisMode: "sentinel"}, "needs `sentinel_master`"},
		{&Distributed{Redis: "rediss://a:6379", TLSCAFile: "ca.pem"}, "must be an absolute path"},
		{&Distributed{Redis: "redis://a:6379", RedisNodes: []string{"redis://b:6379"}}, "need redis_mode"},
	} {
		err := checkPolicy([]byte(policyOf(c.d)), "distributed zones")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", c.d, err, c.want)
		}
	}
	bad := "weir {\n\tdistributed {\n\t\tredis_mode\n\t}\n}\n"
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
		t.Error("redis_mode without a value accepted")
	}
}

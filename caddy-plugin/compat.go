package weir

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// caddy-ratelimit's handler options that go beyond its zones: `distributed`, `jitter`, the
// prefixes of any key. docs/CADDY.md ("Migrating from caddy-ratelimit") maps each one.

// Distributed is caddy-ratelimit's `distributed` block, mapped onto weir's cluster zones:
// every events + window zone of the handler becomes one limit across the Caddy instances
// that name the same Redis (or Valkey) server and zone name.
type Distributed struct {
	// How often caddy-ratelimit wrote and read its state. weir exchanges counts every
	// min(write_interval, read_interval) (default 100ms), kept within 10ms … window/4.
	WriteInterval caddy.Duration `json:"write_interval,omitempty"`
	ReadInterval  caddy.Duration `json:"read_interval,omitempty"`
	// Accepted, no effect: weir's Redis counters expire by themselves.
	PurgeAge caddy.Duration `json:"purge_age,omitempty"`
	// The Redis or Valkey server: redis://[user:password@]host:port/db, rediss://, redis+unix://.
	Redis string `json:"redis,omitempty"`
	// Further URLs after redis: the other seed nodes of a Redis Cluster, or the other
	// Sentinels (with redis_mode).
	RedisNodes []string `json:"redis_nodes,omitempty"`
	// "standalone" (default), "cluster" (the URLs are Redis Cluster nodes) or "sentinel"
	// (the URLs are Sentinels of the master sentinel_master).
	RedisMode      string `json:"redis_mode,omitempty"`
	SentinelMaster string `json:"sentinel_master,omitempty"`
	// For rediss:// URLs: a CA to trust instead of the system's, and a client certificate and
	// key (mutual TLS); absolute paths of PEM files.
	TLSCAFile   string `json:"tls_ca_file,omitempty"`
	TLSCertFile string `json:"tls_cert_file,omitempty"`
	TLSKeyFile  string `json:"tls_key_file,omitempty"`
	// Redis password (overrides one in the URL).
	Password string `json:"password,omitempty"`
	// Instances sharing the limit: while Redis is unreachable each admits events ÷
	// expected_nodes per window. Default 1 (each instance admits the whole limit alone).
	ExpectedNodes int `json:"expected_nodes,omitempty"`
}

// errNoRedis is the error of a `distributed` block without a server.
const errNoRedis = "weir: distributed needs a Redis or Valkey server, which weir shares counts through (not Caddy's storage): " +
	"add `redis redis://HOST:6379/0` inside distributed { } (JSON: the field redis of distributed), " +
	"and `expected_nodes N` with the number of Caddy instances"

// Most jitter accepted: Retry-After at most 11 times the wait.
const maxJitter = 10

// validateCompat checks the handler-wide caddy-ratelimit options.
func (h *Handler) validateCompat() error {
	if math.IsNaN(h.Jitter) || h.Jitter < 0 || h.Jitter > maxJitter {
		return fmt.Errorf("weir: jitter must be between 0 and %d (0.2 = up to 20%% more), got %v", maxJitter, h.Jitter)
	}
	if h.SweepInterval < 0 {
		return fmt.Errorf("weir: sweep_interval must not be negative")
	}
	if len(h.StorageRaw) > 0 {
		var st map[string]any
		if err := json.Unmarshal(h.StorageRaw, &st); err != nil {
			return fmt.Errorf("weir: storage must be a storage module object: %v", err)
		}
	}
	for name, z := range h.RateLimits {
		switch {
		case z.Scope != "" && z.Scope != "local" && z.Scope != "cluster":
			return fmt.Errorf("weir: zone %s: unknown scope %q (expected local or cluster)", name, z.Scope)
		case z.Scope == "cluster" && h.Distributed == nil:
			return fmt.Errorf("weir: zone %s: scope cluster needs the handler's distributed block (its Redis settings)", name)
		}
	}
	d := h.Distributed
	if d == nil {
		return nil
	}
	if d.Redis == "" {
		return fmt.Errorf("%s", errNoRedis)
	}
	if d.WriteInterval < 0 || d.ReadInterval < 0 || d.PurgeAge < 0 {
		return fmt.Errorf("weir: distributed: intervals must not be negative")
	}
	if d.ExpectedNodes < 0 {
		return fmt.Errorf("weir: distributed: expected_nodes must be at least 1")
	}
	for name, z := range h.RateLimits {
		if z.MaxEvents == 0 && z.Window == 0 {
			// gcra and concurrency zones stay local unless they say scope cluster
			if n := max(d.ExpectedNodes, 1); z.Scope == "cluster" && z.Rate == "" && !z.MaxAuto && z.Max < n {
				return fmt.Errorf("weir: zone %s: max (%d) must be at least expected_nodes (%d)", name, z.Max, n)
			}
			continue
		}
		if z.Window < caddy.Duration(time.Second) {
			return fmt.Errorf("weir: zone %s: with distributed, window must be at least 1s (weir's cluster zones), got %v", name, time.Duration(z.Window))
		}
		if z.Window%caddy.Duration(time.Millisecond) != 0 {
			return fmt.Errorf("weir: zone %s: with distributed, window must be whole milliseconds", name)
		}
		if n := max(d.ExpectedNodes, 1); z.MaxEvents < n {
			return fmt.Errorf("weir: zone %s: events (%d) must be at least expected_nodes (%d)", name, z.MaxEvents, n)
		}
	}
	return nil
}

// clusterParams makes an events + window zone a cluster zone: weir's sliding-window estimate
// (two counters per key add up across nodes; an exact log does not), synced through Redis.
// A rate (gcra) or concurrency zone with `scope cluster` becomes one too: a GCRA shared by
// TAT exchange, or a pool of max leased to the instances by demand (docs/CLUSTER.md).
func (d *Distributed) clusterParams(p zoneParams, scope string) zoneParams {
	longest := 5 * time.Second // a gcra or concurrency zone's longest sync interval
	switch {
	case p.algorithm == algSliding || p.algorithm == algSlidingLog:
		if p.algorithm == algSlidingLog && p.bytes > 1<<20 {
			p.bytes = 1 << 20 // a log zone's default size was for its logs
		}
		p.algorithm = algSliding
		longest = time.Duration(p.windowNS) / 4
	case scope != "cluster":
		return p
	}
	sync := 100 * time.Millisecond
	if iv := time.Duration(min(d.WriteInterval, d.ReadInterval)); iv > 0 {
		sync = iv
	} else if iv := time.Duration(max(d.WriteInterval, d.ReadInterval)); iv > 0 {
		sync = iv
	}
	sync = min(max(sync, 10*time.Millisecond), longest).Truncate(time.Millisecond)
	var b strings.Builder
	fmt.Fprintf(&b, "scope = \"cluster\"\n")
	if len(d.RedisNodes) == 0 {
		fmt.Fprintf(&b, "redis = %s\n", tomlString(d.Redis))
	} else {
		urls := []string{tomlString(d.Redis)}
		for _, u := range d.RedisNodes {
			urls = append(urls, tomlString(u))
		}
		fmt.Fprintf(&b, "redis = [%s]\n", strings.Join(urls, ", "))
	}
	// The engine checks these (mode names, readable PEM files) when it compiles the policy.
	for _, kv := range [][2]string{
		{"redis_mode", d.RedisMode}, {"sentinel_master", d.SentinelMaster},
		{"tls_ca_file", d.TLSCAFile}, {"tls_cert_file", d.TLSCertFile}, {"tls_key_file", d.TLSKeyFile},
		{"password", d.Password},
	} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "%s = %s\n", kv[0], tomlString(kv[1]))
		}
	}
	fmt.Fprintf(&b, "sync_interval = \"%dms\"\nexpected_nodes = %d\n", sync.Milliseconds(), max(d.ExpectedNodes, 1))
	p.cluster = b.String()
	return p
}

// tomlString quotes s as a TOML basic string (JSON's escapes are TOML's).
func tomlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// zonesPolicy is the policy text of inline zones, for what the C ABI's declarations lack (a
// distributed handler's cluster scope, learned concurrency limits): one zone and one
// host-selected limit (`class = "@host"`) each, limit i being zones[i], as newZonesEngine
// declares them through the C ABI.
func zonesPolicy(zones []*inlineZone) string {
	var b strings.Builder
	for _, z := range zones {
		p := &z.params
		fmt.Fprintf(&b, "[zones.%s]\nsize = %d\n", tomlString(p.engName), p.bytes)
		switch p.algorithm {
		case algSliding, algSlidingLog:
			alg := "sliding"
			if p.algorithm == algSlidingLog {
				alg = "sliding_log"
			}
			fmt.Fprintf(&b, "algorithm = %q\nevents = %d\nwindow = \"%dms\"\n", alg, p.events, p.windowNS/1e6)
		case algGCRA:
			unit := map[uint64]string{1e9: "s", 60e9: "m", 3600e9: "h", 86400e9: "d"}[p.periodNS]
			fmt.Fprintf(&b, "algorithm = \"gcra\"\nrate = \"%dr/%s\"\n", p.count, unit)
		default:
			if p.auto {
				fmt.Fprintf(&b, "algorithm = \"concurrency\"\nmax = \"auto\"\nbounds = [%d, %d]\n", p.bounds[0], p.bounds[1])
			} else {
				fmt.Fprintf(&b, "algorithm = \"concurrency\"\nmax = %d\n", p.max)
			}
		}
		b.WriteString(p.cluster)
	}
	levels := []string{"info", "notice", "warn", "error"}
	for _, z := range zones {
		p := &z.params
		fmt.Fprintf(&b, "\n[[limit]]\nclass = \"@host\"\nzone = %s\nname = %s\nkey = %s\nlog_level = %q\n",
			tomlString(p.engName), tomlString(p.engName), tomlString(p.key), levels[p.logLevel])
		if p.status != 0 {
			fmt.Fprintf(&b, "status = %d\n", p.status)
		}
		for _, pf := range []struct {
			name string
			n    int
		}{{"ipv4_prefix", p.v4}, {"ipv6_prefix", p.v6}} {
			if pf.n >= 0 && p.key != "global" {
				fmt.Fprintf(&b, "%s = %d\n", pf.name, pf.n)
			}
		}
		switch p.algorithm {
		case algGCRA:
			fmt.Fprintf(&b, "burst = %d\nnodelay = true\n", p.burst)
		case algConcurrency:
			if p.queue > 0 {
				fmt.Fprintf(&b, "queue = %d\n", p.queue)
			}
			if p.timeoutNS > 0 {
				fmt.Fprintf(&b, "timeout = \"%dms\"\n", p.timeoutNS/1e6)
			}
		}
	}
	return b.String()
}

// newClusterZonesState makes the engine of a distributed handler's zones (its cluster
// syncers start with it and stop when it is freed).
func newClusterZonesState(zones []*inlineZone, d *Distributed, logger *zap.Logger) (caddy.Destructor, error) {
	startClusterLog()
	// Zones are pooled per Redis deployment (named by a hash: the URLs may hold a password).
	sum := sha256.Sum256([]byte(strings.Join(append([]string{d.Redis}, d.RedisNodes...), "\x00")))
	owner := "distributed zones " + hex.EncodeToString(sum[:8])
	eng, held, err := newPolicyEngine([]byte(zonesPolicy(zones)), "distributed zones", owner, false, logger)
	if err != nil {
		return nil, fmt.Errorf("distributed (redis %s): %v", d.Redis, err)
	}
	names := make([]string, len(zones))
	for i, z := range zones {
		names[i] = z.name
	}
	s := newEngineState(eng, held, "distributed zones", names)
	hub.track(s)
	return s, nil
}

// jittered is a Retry-After of wait seconds stretched by up to jitter·wait, at random:
// between wait and ⌈wait·(1 + jitter)⌉.
func jittered(wait int64, jitter float64) int64 {
	if jitter <= 0 || wait <= 0 {
		return wait
	}
	return int64(math.Ceil(float64(wait) * (1 + rand.Float64()*jitter)))
}

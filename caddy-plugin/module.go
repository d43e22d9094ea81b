// Package weir is a Caddy v2 HTTP handler (http.handlers.weir) running the weir rate-limit
// engine through its C ABI: a weir policy file, and/or inline zones shaped like
// caddy-ratelimit's (exact sliding log), plus GCRA and concurrency zones.
package weir

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler limits requests with weir.
type Handler struct {
	// A weir policy file (TOML, see docs/POLICY.md). Relative paths are relative to
	// Caddy's working directory.
	Policy string `json:"policy,omitempty"`

	// Inline zones, keyed by name. The same JSON shape as caddy-ratelimit's
	// `rate_limits` (match, key, max_events, window), plus ipv4_prefix/ipv6_prefix, GCRA
	// (rate, burst) and concurrency (max or max_auto + bounds, queue, timeout) zones.
	RateLimits map[string]*Zone `json:"rate_limits,omitempty"`

	// Log the (expanded) key of rejected requests. Off by default: keys may be personal data.
	LogKey bool `json:"log_key,omitempty"`

	// caddy-ratelimit's handler options (docs/CADDY.md, "Migrating from caddy-ratelimit").
	// Jitter: Retry-After of an inline zone's rejection is stretched by up to this fraction
	// (0.2: up to 20 % more), at random; 0 to 10.
	Jitter float64 `json:"jitter,omitempty"`
	// SweepInterval is accepted and has no effect: weir's tables have a fixed size and
	// evict expired keys themselves.
	SweepInterval caddy.Duration `json:"sweep_interval,omitempty"`
	// Distributed makes the events + window zones one limit across Caddy instances that
	// share a Redis or Valkey server (weir's cluster zones, docs/CLUSTER.md).
	Distributed *Distributed `json:"distributed,omitempty"`
	// StorageRaw is accepted and not used: distributed state goes through Redis.
	StorageRaw json.RawMessage `json:"storage,omitempty"`
	// DisableMetrics leaves this handler's zones out of the caddy_rate_limit_* families.
	DisableMetrics bool `json:"disable_metrics,omitempty"`

	logger *zap.Logger
	// answerRejections: the server has no handle_errors routes, so rejections are answered
	// here instead of handed to Caddy's error handling (see rejected).
	answerRejections bool
	policyKey        string
	policy           *engineState
	// Inline zones, rate zones first: zone i is limit i of zoneEng.
	zones      []*inlineZone
	zonesKey   string
	zoneEng    *engineState
	zonesUseIP bool  // a zone is keyed by the client address (the engine's `ip` part)
	varZones   []int // the zone whose key is the engine's variable i
}

// Zone is one inline zone. Exactly one algorithm's parameters must be given:
// sliding (max_events + window), gcra (rate [+ burst]) or concurrency (max, or max_auto [+ bounds]; [+ queue, timeout]).
type Zone struct {
	// Which requests the zone concerns (Caddy matchers; any set matches). Default: all.
	MatcherSetsRaw caddyhttp.RawMatcherSets `json:"match,omitempty" caddy:"namespace=http.matchers"`
	// The key, with Caddy placeholders ({client_ip}, {http.request.uri.path}, ...). A
	// constant (or empty) key is one bucket for everybody.
	Key string `json:"key,omitempty"`
	// Sliding window: events per window.
	MaxEvents int            `json:"max_events,omitempty"`
	Window    caddy.Duration `json:"window,omitempty"`
	// When the expanded key is an IP address, keep only this prefix (0: the whole address).
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`
	// GCRA: "10r/s", "30r/m", "100r/h", "1000r/d" and the excess tolerated (never delayed).
	Rate  string `json:"rate,omitempty"`
	Burst int    `json:"burst,omitempty"`
	// Concurrency: requests in flight per key, how many may wait, and for how long (default 5s).
	Max     int            `json:"max,omitempty"`
	Queue   int            `json:"queue,omitempty"`
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// Concurrency, instead of max: the limit is learned from the backend's latency (the
	// policy's max = "auto"), within bounds [min, max] (default [1, 1000]).
	MaxAuto bool  `json:"max_auto,omitempty"`
	Bounds  []int `json:"bounds,omitempty"`
	// Status for rejections (default 429).
	Status int `json:"status,omitempty"`
	// Table size in bytes (default 1 MiB; the table holds a fixed number of keys and evicts
	// expired ones first).
	Size int `json:"size,omitempty"`
	// Level of the log entry of each rejection: info (default), notice, warn or error.
	LogLevel string `json:"log_level,omitempty"`
	// "cluster": a rate (gcra) or concurrency zone shared through the handler's distributed
	// Redis settings, as a policy zone with scope = "cluster" (docs/CLUSTER.md). Events +
	// window zones of a distributed handler are shared anyway; "local" (default) otherwise.
	Scope string `json:"scope,omitempty"`
}

// inlineZone is a provisioned inline zone: limit `limit` of the handler's zone engine.
type inlineZone struct {
	name     string
	params   zoneParams
	key      zoneKey
	matchers caddyhttp.MatcherSets
	limit    uint16
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.weir",
		New: func() caddy.Module { return new(Handler) },
	}
}

// maxLogEvents is the most events per key an exact sliding-log zone keeps.
const maxLogEvents = 4096

// Inline zones are evaluated by weir_engine_evaluate_selected, which takes at most this many
// limits, of which at most maxConcZones concurrency limits (weir.h: WEIR_MAX_PERMITS).
const (
	maxZones     = 32
	maxConcZones = 4
)

// zoneParamsOf validates a zone and returns its weir zone and limit (the engine's zone and
// its one limit; equal layouts share state across reloads).
func zoneParamsOf(name string, z *Zone) (zoneParams, error) {
	p := zoneParams{engName: engineName(name), bytes: 1 << 20, v4: -1, v6: -1}
	if z.Size != 0 {
		if err := checkSize(z.Size, zoneMinBytes()); err != nil {
			return p, fmt.Errorf("zone %s: %v", name, err)
		}
		p.bytes = uint64(z.Size)
	}
	if z.LogLevel != "" {
		if _, err := parseLogLevel(z.LogLevel); err != nil {
			return p, fmt.Errorf("zone %s: %v", name, err)
		}
	}
	p.logLevel = engineLogLevel(cmp.Or(z.LogLevel, "info"))
	sliding := z.MaxEvents != 0 || z.Window != 0
	gcra := z.Rate != "" || z.Burst != 0
	conc := z.Max != 0 || z.MaxAuto || len(z.Bounds) > 0 || z.Queue != 0 || z.Timeout != 0
	n := 0
	for _, b := range []bool{sliding, gcra, conc} {
		if b {
			n++
		}
	}
	if n != 1 {
		return p, fmt.Errorf("zone %s: give exactly one of: events + window (sliding), rate [+ burst] (gcra), max or max auto [+ queue, timeout] (concurrency)", name)
	}
	if z.IPv4Prefix < 0 || z.IPv4Prefix > 32 {
		return p, fmt.Errorf("zone %s: ipv4_prefix must be 0-32, got %d", name, z.IPv4Prefix)
	}
	if z.IPv6Prefix < 0 || z.IPv6Prefix > 128 {
		return p, fmt.Errorf("zone %s: ipv6_prefix must be 0-128, got %d", name, z.IPv6Prefix)
	}
	if z.Status != 0 && (z.Status < 400 || z.Status > 599) {
		return p, fmt.Errorf("zone %s: status must be 400-599, got %d", name, z.Status)
	}
	p.status = z.Status
	switch k := compileKey(z.Key); {
	case k.isClientIP():
		// The engine's own `ip` part (the peer is Caddy's client_ip); 0 keeps the whole address.
		p.key, p.v4, p.v6 = "ip", cmp.Or(z.IPv4Prefix, 32), cmp.Or(z.IPv6Prefix, 128)
	case k.kind == keyConst:
		p.key = "global" // one bucket: a prefix changes nothing
	default:
		// Another key: an expanded key that is an IP address is masked to the prefix of its
		// family (caddy-ratelimit's meaning of the prefixes; 0: kept whole), by the engine.
		p.key, p.v4, p.v6 = "var:"+p.engName, orNone(z.IPv4Prefix), orNone(z.IPv6Prefix)
	}
	switch {
	case sliding:
		if z.Window <= 0 {
			return p, fmt.Errorf("zone %s: a sliding zone requires both a window and events (window > 0)", name)
		}
		if z.MaxEvents <= 0 {
			return p, fmt.Errorf("zone %s: a sliding zone requires both a window and events (events >= 1)", name)
		}
		p.algorithm, p.events, p.windowNS = algSliding, uint64(z.MaxEvents), uint64(z.Window)
		// caddy-ratelimit's exact sliding log when it fits (up to 4096 events per key, a
		// window of at least 1 ms); beyond, the sliding-window estimate.
		if z.MaxEvents <= maxLogEvents && z.Window >= caddy.Duration(time.Millisecond) {
			p.algorithm = algSlidingLog
			// Without a size: 1 MiB, or room for 1024 keys when their logs need more.
			if min := logZoneBytes(p.events, 1024); z.Size == 0 && p.bytes < min {
				p.bytes = min
			}
			if err := checkSize(int(p.bytes), logZoneBytes(p.events, 1)); err != nil {
				return p, fmt.Errorf("zone %s: %v", name, err)
			}
		}
	case gcra:
		if z.Rate == "" {
			return p, fmt.Errorf("zone %s: burst needs a rate (e.g. rate 10r/s)", name)
		}
		count, period, err := parseRate(z.Rate)
		if err != nil {
			return p, fmt.Errorf("zone %s: %v", name, err)
		}
		if z.Burst < 0 {
			return p, fmt.Errorf("zone %s: burst must be >= 0", name)
		}
		p.algorithm, p.count, p.periodNS, p.burst, p.delay = algGCRA, count, period, uint64(z.Burst), -1
	default:
		if err := learnedParams(name, z, &p); err != nil {
			return p, err
		}
		if z.Max <= 0 && !z.MaxAuto {
			return p, fmt.Errorf("zone %s: a concurrency zone requires max >= 1 (or max auto)", name)
		}
		if z.Queue < 0 {
			return p, fmt.Errorf("zone %s: queue must be >= 0", name)
		}
		if z.Timeout < 0 || (z.Timeout != 0 && z.Queue == 0) {
			return p, fmt.Errorf("zone %s: timeout has no effect without queue", name)
		}
		p.algorithm, p.queue, p.timeoutNS = algConcurrency, uint64(z.Queue), uint64(z.Timeout)
		if !z.MaxAuto {
			p.max = uint64(z.Max)
		}
	}
	return p, nil
}

// Bounds of a learned limit: the policy's default, and the most either may be.
const (
	autoMin, autoMax = 1, 1000
	autoBoundMost    = 65535
)

// learnedParams checks a concurrency zone's max auto and bounds into p.
func learnedParams(name string, z *Zone, p *zoneParams) error {
	switch {
	case z.MaxAuto && z.Max != 0:
		return fmt.Errorf("zone %s: give max <n> or max auto, not both", name)
	case !z.MaxAuto && len(z.Bounds) > 0:
		return fmt.Errorf("zone %s: bounds applies only to max auto", name)
	case !z.MaxAuto:
		return nil
	}
	p.auto, p.bounds = true, [2]uint64{autoMin, autoMax}
	if len(z.Bounds) == 0 {
		return nil
	}
	if len(z.Bounds) != 2 {
		return fmt.Errorf("zone %s: bounds is two numbers, min and max (like 2 400)", name)
	}
	lo, hi := z.Bounds[0], z.Bounds[1]
	if lo < 1 || hi < 1 || lo > autoBoundMost || hi > autoBoundMost {
		return fmt.Errorf("zone %s: bounds must be 1-%d, got %d %d", name, autoBoundMost, lo, hi)
	}
	if lo > hi {
		return fmt.Errorf("zone %s: bounds out of order: min %d is above max %d", name, lo, hi)
	}
	p.bounds = [2]uint64{uint64(lo), uint64(hi)}
	return nil
}

// engineName is the name a zone has in the engine: its own when the policy's names allow it
// (1-64 letters, digits, '-', '_' or '.', starting with a letter or digit), else one made
// from its hash. Caddy shows the zone's own name everywhere.
func engineName(name string) string {
	ok := len(name) >= 1 && len(name) <= 64
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		ok = alnum || i > 0 && (c == '-' || c == '_' || c == '.')
	}
	if ok {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "zone-" + hex.EncodeToString(sum[:8])
}

// Validate checks the configuration without allocating tables.
func (h *Handler) Validate() error {
	if h.Policy == "" && len(h.RateLimits) == 0 {
		return fmt.Errorf("weir: give a policy file or at least one zone")
	}
	conc := 0
	for name, z := range h.RateLimits {
		p, err := zoneParamsOf(name, z)
		if err != nil {
			return fmt.Errorf("weir: %v", err)
		}
		if p.algorithm == algConcurrency {
			conc++
		}
	}
	if len(h.RateLimits) > maxZones || conc > maxConcZones {
		return fmt.Errorf("weir: at most %d zones, of them %d concurrency zones, in one weir handler", maxZones, maxConcZones)
	}
	return h.validateCompat()
}

// Provision loads the policy and zones, reusing the engines of an earlier config when the
// policy content or zone parameters are unchanged, and otherwise the regions of every zone
// whose layout did not change (regions.go).
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger(h)
	if err := h.Validate(); err != nil {
		return err
	}
	if h.Distributed != nil && h.Distributed.ExpectedNodes == 0 {
		h.logger.Warn("distributed: expected_nodes not given; while Redis is unreachable each instance admits a zone's whole events on its own")
	}
	if err := h.checkServer(ctx); err != nil {
		return err
	}
	if h.Policy != "" {
		startClusterLog()
		text, err := os.ReadFile(h.Policy)
		if err != nil {
			return fmt.Errorf("weir: reading policy: %v", err)
		}
		sum := sha256.Sum256(text)
		h.policyKey = "policy|" + h.Policy + "|" + hex.EncodeToString(sum[:8])
		// Zones are pooled by the file's absolute path: edits of one file keep its zones.
		owner := h.Policy
		if abs, err := filepath.Abs(h.Policy); err == nil {
			owner = abs
		}
		v, _, err := pool.LoadOrNew(h.policyKey, func() (caddy.Destructor, error) {
			eng, held, err := newPolicyEngine(text, h.Policy, "policy "+owner, true, h.logger)
			if err != nil {
				return nil, err
			}
			s := newEngineState(eng, held, h.Policy, eng.limits)
			hub.track(s)
			return s, nil
		})
		if err != nil {
			// The message starts with file:line:col (weir's policy errors).
			return fmt.Errorf("weir: %v", err)
		}
		h.policy = v.(*engineState)
	}
	if len(h.RateLimits) > 0 {
		if err := h.provisionZones(ctx); err != nil {
			return err
		}
	}
	registerMetrics(ctx)
	hub.addCompat(h)
	return nil
}

// provisionZones makes the inline zones one engine (a zone and one host-selected limit per
// inline zone), shared by every config with the same zones: a reload that changes none of
// them keeps their state and counters. A reload that changes some gets a new engine, over
// the tables of the zones whose layout did not change (which keep their state, see
// regions.go; the engine's counters start afresh).
func (h *Handler) provisionZones(ctx caddy.Context) error {
	names := make([]string, 0, len(h.RateLimits))
	for name := range h.RateLimits {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		z := h.RateLimits[name]
		p, _ := zoneParamsOf(name, z)
		if h.Distributed != nil {
			p = h.Distributed.clusterParams(p, z.Scope)
		}
		iz := &inlineZone{name: name, params: p, key: compileKey(z.Key)}
		if len(z.MatcherSetsRaw) > 0 {
			m, err := ctx.LoadModule(z, "MatcherSetsRaw")
			if err != nil {
				return fmt.Errorf("weir: zone %s: loading matchers: %v", name, err)
			}
			if err := iz.matchers.FromInterface(m); err != nil {
				return fmt.Errorf("weir: zone %s: %v", name, err)
			}
		}
		h.zones = append(h.zones, iz)
	}
	// Rate zones first, concurrency zones last, so that a request refused by a rate zone
	// never occupies a concurrency slot (the engine charges the limits in this order).
	sort.SliceStable(h.zones, func(i, j int) bool {
		return h.zones[i].params.algorithm != algConcurrency && h.zones[j].params.algorithm == algConcurrency
	})
	key := "zones"
	for i, z := range h.zones {
		z.limit = uint16(i)
		key += fmt.Sprintf("|%q=%+v", z.name, z.params)
	}
	if h.Distributed != nil {
		key = "distributed|" + key
	}
	v, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		if h.Distributed != nil {
			return newClusterZonesState(h.zones, h.Distributed, h.logger)
		}
		eng, held, err := newZonesEngine(h.zones, h.logger)
		if err != nil {
			return nil, err
		}
		names := make([]string, len(h.zones))
		for i, z := range h.zones {
			names[i] = z.name
		}
		s := newEngineState(eng, held, "inline zones", names)
		hub.track(s)
		return s, nil
	})
	if err != nil {
		return fmt.Errorf("weir: inline zones: %v", err)
	}
	h.zonesKey, h.zoneEng = key, v.(*engineState)
	// The engine asks for its variables by index: varZones[i] is the zone of variable i.
	for _, name := range h.zoneEng.eng.vars {
		for zi, z := range h.zones {
			if z.params.key == "var:"+name {
				h.varZones = append(h.varZones, zi)
			}
		}
	}
	for _, z := range h.zones {
		h.zonesUseIP = h.zonesUseIP || z.params.key == "ip"
	}
	return nil
}

// Cleanup drops this config's references; the last user frees the engines.
func (h *Handler) Cleanup() error {
	if h.policyKey != "" {
		_, _ = pool.Delete(h.policyKey)
	}
	if h.zonesKey != "" {
		_, _ = pool.Delete(h.zonesKey)
	}
	hub.removeCompat(h)
	return nil
}

// sleepCtx waits d or until ctx is done; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)

// orNone is a prefix for the engine: -1 (not given) for 0.
func orNone(prefix int) int {
	if prefix == 0 {
		return -1
	}
	return prefix
}

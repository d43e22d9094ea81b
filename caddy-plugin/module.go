// Package weir is a Caddy v2 HTTP handler (http.handlers.weir) running the weir rate-limit
// engine through its C ABI: a weir policy file, and/or inline zones shaped like
// caddy-ratelimit's (exact sliding log), plus GCRA and concurrency zones.
package weir

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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
	// (rate, burst) and concurrency (max, queue, timeout) zones.
	RateLimits map[string]*Zone `json:"rate_limits,omitempty"`

	// Log the (expanded) key of rejected requests. Off by default: keys may be personal data.
	LogKey bool `json:"log_key,omitempty"`

	logger *zap.Logger
	// answerRejections: the server has no handle_errors routes, so rejections are answered
	// here instead of handed to Caddy's error handling (see rejected).
	answerRejections bool
	policyKey        string
	policy           *engineState
	zones            []*inlineZone
}

// Zone is one inline zone. Exactly one algorithm's parameters must be given:
// sliding (max_events + window), gcra (rate [+ burst]) or concurrency (max [+ queue, timeout]).
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
	// Status for rejections (default 429).
	Status int `json:"status,omitempty"`
	// Table size in bytes (default 1 MiB; the table holds a fixed number of keys and evicts
	// expired ones first).
	Size int `json:"size,omitempty"`
	// Level of the log entry of each rejection: info (default), notice, warn or error.
	LogLevel string `json:"log_level,omitempty"`
}

type inlineZone struct {
	name     string
	cfg      *Zone
	key      zoneKey
	params   zoneParams
	poolKey  string
	state    *zoneState
	matchers caddyhttp.MatcherSets
	status   int
	timeout  time.Duration
	logLevel zapcore.Level
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

// zoneParamsOf validates a zone and returns its weir parameters.
func zoneParamsOf(name string, z *Zone) (zoneParams, error) {
	p := zoneParams{bytes: 1 << 20}
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
	sliding := z.MaxEvents != 0 || z.Window != 0
	gcra := z.Rate != "" || z.Burst != 0
	conc := z.Max != 0 || z.Queue != 0 || z.Timeout != 0
	n := 0
	for _, b := range []bool{sliding, gcra, conc} {
		if b {
			n++
		}
	}
	if n != 1 {
		return p, fmt.Errorf("zone %s: give exactly one of: events + window (sliding), rate [+ burst] (gcra), max [+ queue, timeout] (concurrency)", name)
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
	switch {
	case sliding:
		if z.Window <= 0 {
			return p, fmt.Errorf("zone %s: a sliding zone requires both a window and events (window > 0)", name)
		}
		if z.MaxEvents <= 0 {
			return p, fmt.Errorf("zone %s: a sliding zone requires both a window and events (events >= 1)", name)
		}
		p.kind, p.events, p.windowNS = kindSliding, uint64(z.MaxEvents), uint64(z.Window)
		// caddy-ratelimit's exact sliding log when it fits (up to 4096 events per key, a
		// window of at least 1 ms); beyond, the sliding-window estimate.
		if z.MaxEvents <= maxLogEvents && z.Window >= caddy.Duration(time.Millisecond) {
			p.kind = kindLog
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
		p.kind, p.count, p.periodNS, p.burst, p.delay = kindGCRA, count, period, uint64(z.Burst), -1
	default:
		if z.Max <= 0 {
			return p, fmt.Errorf("zone %s: a concurrency zone requires max >= 1", name)
		}
		if z.Queue < 0 {
			return p, fmt.Errorf("zone %s: queue must be >= 0", name)
		}
		if z.Timeout < 0 || (z.Timeout != 0 && z.Queue == 0) {
			return p, fmt.Errorf("zone %s: timeout has no effect without queue", name)
		}
		p.kind, p.max = kindConcurrency, uint64(z.Max)
	}
	return p, nil
}

// Validate checks the configuration without allocating tables.
func (h *Handler) Validate() error {
	if h.Policy == "" && len(h.RateLimits) == 0 {
		return fmt.Errorf("weir: give a policy file or at least one zone")
	}
	for name, z := range h.RateLimits {
		if _, err := zoneParamsOf(name, z); err != nil {
			return fmt.Errorf("weir: %v", err)
		}
	}
	return nil
}

// Provision loads the policy and zones, reusing the tables of an earlier config when the
// policy content or zone parameters are unchanged.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger(h)
	if err := h.Validate(); err != nil {
		return err
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
		v, _, err := pool.LoadOrNew(h.policyKey, func() (caddy.Destructor, error) {
			eng, err := newEngine(text, h.Policy)
			if err != nil {
				return nil, err
			}
			s := &engineState{eng: eng, source: h.Policy}
			for i := range eng.limits {
				s.timeouts = append(s.timeouts, eng.queueTimeout(i))
				s.logLevels = append(s.logLevels, policyLogLevel(eng.logLevel(i)))
			}
			return s, nil
		})
		if err != nil {
			// The message starts with file:line:col (weir's policy errors).
			return fmt.Errorf("weir: %v", err)
		}
		h.policy = v.(*engineState)
	}
	names := make([]string, 0, len(h.RateLimits))
	for name := range h.RateLimits {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		z := h.RateLimits[name]
		p, _ := zoneParamsOf(name, z)
		iz := &inlineZone{name: name, cfg: z, key: compileKey(z.Key), params: p, status: z.Status}
		if iz.status == 0 {
			iz.status = http.StatusTooManyRequests
		}
		iz.logLevel, _ = parseLogLevel(cmp.Or(z.LogLevel, "info"))
		iz.timeout = time.Duration(z.Timeout)
		if iz.timeout == 0 {
			iz.timeout = 5 * time.Second
		}
		if len(z.MatcherSetsRaw) > 0 {
			m, err := ctx.LoadModule(z, "MatcherSetsRaw")
			if err != nil {
				return fmt.Errorf("weir: zone %s: loading matchers: %v", name, err)
			}
			if err := iz.matchers.FromInterface(m); err != nil {
				return fmt.Errorf("weir: zone %s: %v", name, err)
			}
		}
		iz.poolKey = fmt.Sprintf("zone|%s|%+v", name, p)
		v, _, err := pool.LoadOrNew(iz.poolKey, func() (caddy.Destructor, error) {
			zz, err := newZone(p)
			if err != nil {
				return nil, err
			}
			return &zoneState{z: zz, name: name, params: p}, nil
		})
		if err != nil {
			return fmt.Errorf("weir: zone %s: %v", name, err)
		}
		iz.state = v.(*zoneState)
		h.zones = append(h.zones, iz)
	}
	// Rate zones first, concurrency zones last, so that a request refused by a rate zone
	// never occupies a concurrency slot.
	sort.SliceStable(h.zones, func(i, j int) bool {
		return h.zones[i].params.kind != kindConcurrency && h.zones[j].params.kind == kindConcurrency
	})
	registerMetrics(ctx, h)
	return nil
}

// Cleanup drops this config's references; the last user frees the tables.
func (h *Handler) Cleanup() error {
	if h.policyKey != "" {
		_, _ = pool.Delete(h.policyKey)
	}
	for _, z := range h.zones {
		_, _ = pool.Delete(z.poolKey)
	}
	return nil
}

// applyPrefix masks an IP-address key to the configured prefix (caddy-ratelimit's
// ipv4_prefix / ipv6_prefix): "192.0.2.7" with 24 → "192.0.2.0/24". Other keys are unchanged.
func applyPrefix(key string, v4, v6 int) string {
	if v4 == 0 && v6 == 0 {
		return key
	}
	a, err := netip.ParseAddr(key)
	if err != nil {
		return key
	}
	a = a.WithZone("")
	bits := v6
	if a.Is4() || a.Is4In6() {
		a = a.Unmap()
		bits = v4
	}
	if bits == 0 {
		return key
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return key
	}
	return p.String()
}

// retryAfter formats a wait like caddy-ratelimit: seconds + 0.5, printed without decimals.
func retryAfter(wait time.Duration) string {
	return strconv.FormatFloat(wait.Seconds()+0.5, 'f', 0, 64)
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

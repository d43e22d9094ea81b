package weir

import (
	"context"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// limitSample is weir_limit_requests_total{limit, verdict} in reg (-1 when absent); Gather
// fails the test on a duplicate series or an inconsistent family.
func limitSample(t *testing.T, reg *prometheus.Registry, limit, verdict string) float64 {
	t.Helper()
	return gathered(t, reg, "weir_limit_requests_total", map[string]string{"limit": limit, "verdict": verdict})
}

// gathered is the value of the series of family in reg whose labels include want (-1 when
// absent).
func gathered(t *testing.T, reg *prometheus.Registry, family string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			for k, v := range want {
				if l[k] != v {
					continue series
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return -1
}

// Handlers of one config share its registry: the collector is registered in it once, however
// many handlers provision; a later config's registry gets it again, with the counts of the
// engines the first config freed.
func TestMetricsRegistry(t *testing.T) {
	zones := func(events int) *Handler {
		return &Handler{RateLimits: map[string]*Zone{"metrics-m": {Key: "static", MaxEvents: events, Window: hour}}}
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	h1, h2, h1b := zones(1), zones(2), zones(1) // h1 and h1b: one pooled engine
	for _, h := range []*Handler{h1, h2, h1b} {
		if err := h.Provision(ctx); err != nil {
			t.Fatal(err)
		}
	}
	registerMetrics(ctx)
	for i, want := range []int{200, 429} {
		if status, _, _ := serveZone(t, h1, nextOK); status != want {
			t.Fatalf("request %d: %d, want %d", i, status, want)
		}
	}
	reg := ctx.GetMetricsRegistry()
	if n := limitSample(t, reg, "metrics-m", "rejected"); n != 1 {
		t.Errorf("rejected: %v, want 1", n)
	}
	for _, h := range []*Handler{h1, h2, h1b} {
		_ = h.Cleanup()
	}
	cancel()

	ctx2, cancel2 := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel2()
	h3 := zones(3)
	if err := h3.Provision(ctx2); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h3.Cleanup() }()
	if status, _, _ := serveZone(t, h3, nextOK); status != 200 {
		t.Fatalf("a new zone: %d, want 200", status)
	}
	reg2 := ctx2.GetMetricsRegistry()
	if n := limitSample(t, reg2, "metrics-m", "passed"); n != 2 {
		t.Errorf("passed after the first config's engines were freed: %v, want 2 (1 + 1)", n)
	}
	if n := limitSample(t, reg2, "metrics-m", "rejected"); n != 1 {
		t.Errorf("rejected after the first config's engines were freed: %v, want 1", n)
	}
	// caddy-ratelimit's families follow the same counters; its config series is the live
	// zone's; a handler with disable_metrics adds none.
	quiet := &Handler{DisableMetrics: true, RateLimits: map[string]*Zone{"metrics-quiet": {Key: "static", MaxEvents: 1, Window: hour}}}
	if err := quiet.Provision(ctx2); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = quiet.Cleanup() }()
	serveZone(t, quiet, nextOK)
	m := map[string]string{"zone": "metrics-m"}
	for _, c := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"caddy_rate_limit_requests_total", m, 3},
		{"caddy_rate_limit_declined_requests_total", m, 1},
		{"caddy_rate_limit_keys_total", m, 1},
		{"caddy_rate_limit_config", map[string]string{"zone": "metrics-m", "max_events": "3", "window": "1h0m0s",
			"ipv4_prefix": "0", "ipv6_prefix": "0"}, 1},
		{"caddy_rate_limit_config", map[string]string{"zone": "metrics-m", "max_events": "1"}, -1},
		{"caddy_rate_limit_requests_total", map[string]string{"zone": "metrics-quiet"}, -1},
		{"weir_limit_requests_total", map[string]string{"limit": "metrics-quiet", "verdict": "passed"}, 1},
	} {
		if got := gathered(t, reg2, c.family, c.labels); got != c.want {
			t.Errorf("%s%v: %v, want %v", c.family, c.labels, got, c.want)
		}
	}
}

// A concurrency limit's saturation reaches Caddy's registry with the engine's types: gauges,
// the per-lane shed counter, and the queue-wait histogram as a histogram (buckets, sum, count).
func TestMetricsSaturation(t *testing.T) {
	h := policyHandlerFor(t, "[zones.app]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = 1\n"+
		"[[limit]]\nname = \"metrics-app\"\nclass = \"*\"\nzone = \"app\"\nkey = \"global\"\n")
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Cleanup() }()
	registerMetrics(ctx)
	if status, _, _ := serveZone(t, h, nextOK); status != 200 {
		t.Fatalf("status %d, want 200", status)
	}
	reg := ctx.GetMetricsRegistry()
	lim := map[string]string{"limit": "metrics-app"}
	if got := gathered(t, reg, "weir_concurrency_limit", lim); got != 1 {
		t.Errorf("weir_concurrency_limit: %v, want 1", got)
	}
	if got := gathered(t, reg, "weir_concurrency_shed_total", map[string]string{"limit": "metrics-app", "lane": "critical"}); got != 0 {
		t.Errorf("weir_concurrency_shed_total{lane=critical}: %v, want 0", got)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "weir_concurrency_queue_wait_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if hist := m.GetHistogram(); hist == nil || len(hist.GetBucket()) != 11 {
				t.Fatalf("queue wait is not a histogram of 11 bounds: %v", m)
			}
		}
		return
	}
	t.Fatal("no weir_concurrency_queue_wait_seconds family")
}

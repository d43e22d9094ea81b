package weir

import (
	"errors"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics go to Caddy's Prometheus registry (served by the admin /metrics endpoint and the
// metrics handler). No per-key labels: one series per limit (policy) or zone (inline) and
// outcome, so cardinality is fixed by the configuration.
const metricName = "caddy_http_weir_requests_total"
const metricHelp = "Requests weir decided on, by source (policy file or inline zone), limit and outcome."

// engineCollector reports limits first … first+n-1 of an engine (a policy's: all of them; an
// inline zone's: its one limit, under its own source label).
type engineCollector struct {
	s        *engineState
	first, n int
	desc     *prometheus.Desc
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	if c.s.eng == nil {
		return
	}
	for i := c.first; i < c.first+c.n; i++ {
		name := c.s.name(i)
		lc, ok := c.s.eng.counters(i)
		if !ok {
			continue
		}
		for _, o := range []struct {
			outcome string
			v       uint64
		}{{"passed", lc.passed}, {"delayed", lc.delayed}, {"rejected", lc.rejected}, {"queued", lc.queued},
			{"dry_run_delayed", lc.dryRunDelayed}, {"dry_run_rejected", lc.dryRunRejected}} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(o.v), name, o.outcome)
		}
	}
}

func newDesc(source string) *prometheus.Desc {
	return prometheus.NewDesc(metricName, metricHelp, []string{"limit", "outcome"}, prometheus.Labels{"source": source})
}

func register(reg *prometheus.Registry, c prometheus.Collector) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			_ = err // a conflicting collector: metrics for this source are skipped
		}
	}
}

func registerMetrics(ctx caddy.Context, h *Handler) {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return
	}
	if h.policy != nil {
		register(reg, &engineCollector{s: h.policy, n: len(h.policy.names), desc: newDesc("policy:" + h.policy.source)})
	}
	for i, z := range h.zones {
		register(reg, &engineCollector{s: h.zoneEng, first: i, n: 1, desc: newDesc("zone:" + z.name)})
	}
}

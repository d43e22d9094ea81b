package weir

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// caddy-ratelimit's metric families, for dashboards and alerts written against it, derived
// from the engine's counters of the inline zones (weir_* stay as they are). Zone level only:
// no `key` label (caddy-ratelimit's zone-level series are its key="" ones, which PromQL does
// not tell from a series without the label). A handler with disable_metrics adds none.
const (
	famRLRequests = "caddy_rate_limit_requests_total"
	famRLDeclined = "caddy_rate_limit_declined_requests_total"
	famRLKeys     = "caddy_rate_limit_keys_total"
	famRLConfig   = "caddy_rate_limit_config"
)

var (
	descRLRequests = prometheus.NewDesc(famRLRequests,
		"Requests an inline zone evaluated, whatever the verdict (weir_limit_requests_total of the zone).",
		[]string{"zone"}, nil)
	descRLDeclined = prometheus.NewDesc(famRLDeclined,
		"Requests an inline zone rejected (weir_limit_requests_total{verdict=\"rejected\"} of the zone).",
		[]string{"zone"}, nil)
	descRLKeys = prometheus.NewDesc(famRLKeys,
		"Keys an inline zone's table holds (weir_zone_occupancy of the zone).",
		[]string{"zone"}, nil)
	descRLConfig = prometheus.NewDesc(famRLConfig,
		"One series per configured events + window zone; its labels are the zone's settings.",
		[]string{"zone", "max_events", "window", "ipv4_prefix", "ipv6_prefix"}, nil)
)

// compatZone is what the caddy_rate_limit_* families need of one inline zone.
type compatZone struct {
	name, engName string
	events        int
	window        time.Duration
	v4, v6        int
	sliding       bool
}

// addCompat records h's inline zones (unless it disables the metrics).
func (m *metricsHub) addCompat(h *Handler) {
	if h.DisableMetrics || len(h.zones) == 0 {
		return
	}
	zs := make([]compatZone, 0, len(h.zones))
	for _, z := range h.zones {
		cfg := h.RateLimits[z.name]
		zs = append(zs, compatZone{name: z.name, engName: z.params.engName, events: cfg.MaxEvents,
			window: time.Duration(cfg.Window), v4: cfg.IPv4Prefix, v6: cfg.IPv6Prefix,
			sliding: cfg.MaxEvents != 0 || cfg.Window != 0})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.compat == nil {
		m.compat = map[*Handler][]compatZone{}
	}
	m.compat[h] = zs
}

// removeCompat forgets h (its config is unloaded).
func (m *metricsHub) removeCompat(h *Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.compat, h)
}

// collectCompat sends the caddy_rate_limit_* series of every recorded zone, once per zone
// name, from the weir series of the same collection (merged, counters with their retired
// part). The caller holds m.mu.
func (m *metricsHub) collectCompat(merged map[string]*sample, ch chan<- prometheus.Metric) {
	if len(m.compat) == 0 {
		return
	}
	requests, declined, keys := map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, s := range merged {
		switch s.family {
		case "weir_limit_requests_total":
			limit, verdict := label(s, "limit"), label(s, "verdict")
			requests[limit] += s.value
			if verdict == "rejected" {
				declined[limit] += s.value
			}
		case "weir_zone_occupancy":
			keys[label(s, "zone")] += s.value
		}
	}
	byName := map[string]compatZone{}
	for _, zs := range m.compat {
		for _, z := range zs {
			byName[z.name] = z
		}
	}
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		z := byName[n]
		_, counted := requests[z.engName]
		if _, stored := keys[z.engName]; !counted && !stored {
			continue // no live engine knows the zone (yet)
		}
		ch <- prometheus.MustNewConstMetric(descRLRequests, prometheus.CounterValue, requests[z.engName], n)
		ch <- prometheus.MustNewConstMetric(descRLDeclined, prometheus.CounterValue, declined[z.engName], n)
		ch <- prometheus.MustNewConstMetric(descRLKeys, prometheus.GaugeValue, keys[z.engName], n)
		if z.sliding {
			ch <- prometheus.MustNewConstMetric(descRLConfig, prometheus.CounterValue, 1, n,
				strconv.Itoa(z.events), z.window.String(), strconv.Itoa(z.v4), strconv.Itoa(z.v6))
		}
	}
}

// label is the value of s's label name ("" without it).
func label(s *sample, name string) string {
	for i, n := range s.labelNames {
		if n == name {
			return s.labelValues[i]
		}
	}
	return ""
}

package weir

import (
	"bytes"
	"math"
	"sort"
	"strings"
	"sync"
	"weak"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics: the engine renders them (weir_engine_prometheus, docs/METRICS.md) and one collector
// hands them to Caddy's Prometheus registry (admin /metrics, the metrics handler) under the
// engine's own names, labels, types and help, the same families nginx's weir_status and the
// tower layer serve. No per-key labels: the series are fixed by the configuration.
//
// The collector reports every live engine of the process (policy files and inline zones of
// every weir handler of every running config). Invariants:
//   - a series (family and labels) appears once: the samples of several engines that name it
//     are added up, except counts read from a pooled region (regions.go: a zone's table, a
//     cluster zone's shared side, a policy's counters), which the engines of successive
//     configs share: those are counted once per region;
//   - counters never go backwards across reloads: an engine's counters are added to `retired`
//     when it is freed (not those of a region that lives on in another engine), and `retired`
//     is added to the live series of the same name and labels.
var hub = &metricsHub{
	live:       map[*engineState]struct{}{},
	retired:    map[string]float64{},
	registered: map[weak.Pointer[prometheus.Registry]]struct{}{},
}

type metricsHub struct {
	// mu is taken before any engineState's mu.
	mu      sync.Mutex
	live    map[*engineState]struct{}
	retired map[string]float64
	// registered are the registries holding the collector, weakly: each config has its own.
	registered map[weak.Pointer[prometheus.Registry]]struct{}
	// compat: the inline zones of each provisioned handler, for the caddy_rate_limit_*
	// families (metrics_compat.go).
	compat map[*Handler][]compatZone
}

// Families whose `zone` label names a table's counts, or a cluster zone's shared side's; the
// others are the engine's counters.
const (
	zoneFamilyPrefix    = "weir_zone_"
	clusterFamilyPrefix = "weir_cluster_"
)

// track adds a new engine to the metrics.
func (h *metricsHub) track(s *engineState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live[s] = struct{}{}
}

// retire frees s's engine, adding its final counters to the retired ones.
func (h *metricsHub) retire(s *engineState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(h.live, s)
	if s.eng == nil {
		return
	}
	for _, smp := range engineSamples(s.eng) {
		if smp.typ != dto.MetricType_COUNTER {
			continue
		}
		if r := s.regionOf(smp); r != "" && h.regionLive(r) {
			continue // the next engine over this region reports these counts
		}
		h.retired[smp.key] += smp.value
	}
	s.freeEngine()
}

// regionLive reports whether a live engine holds region r.
func (h *metricsHub) regionLive(r string) bool {
	for s := range h.live {
		if s.held.holds(r) {
			return true
		}
	}
	return false
}

// Describe sends nothing: the families depend on the configuration, so the collector is an
// unchecked one (registered once per registry, see registerMetrics).
func (h *metricsHub) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (h *metricsHub) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	merged := map[string]*sample{}
	var order []string
	seen := map[string]bool{} // region + series: a region's counts counted once
	for s := range h.live {
		s.mu.RLock()
		var got []sample
		if s.eng != nil {
			got = engineSamples(s.eng)
		}
		for _, smp := range got {
			if r := s.regionOf(smp); r != "" {
				if seen[r+"\x00"+smp.key] {
					continue
				}
				seen[r+"\x00"+smp.key] = true
			}
			if m := merged[smp.key]; m != nil {
				m.value += smp.value
				m.count += smp.count
				for le, n := range smp.buckets {
					m.buckets[le] += n
				}
				continue
			}
			c := smp
			if smp.buckets != nil {
				c.buckets = map[float64]uint64{}
				for le, n := range smp.buckets {
					c.buckets[le] = n
				}
			}
			merged[smp.key] = &c
			order = append(order, smp.key)
		}
		s.mu.RUnlock()
	}
	sort.Strings(order)
	for _, k := range order {
		m := merged[k]
		vt := prometheus.GaugeValue
		if m.typ == dto.MetricType_COUNTER {
			vt = prometheus.CounterValue
			m.value += h.retired[k]
		}
		desc := prometheus.NewDesc(m.family, m.help, m.labelNames, nil)
		if m.typ == dto.MetricType_HISTOGRAM {
			if metric, err := prometheus.NewConstHistogram(desc, m.count, m.value, m.buckets, m.labelValues...); err == nil {
				ch <- metric
			}
			continue
		}
		if metric, err := prometheus.NewConstMetric(desc, vt, m.value, m.labelValues...); err == nil {
			ch <- metric
		}
	}
	h.collectCompat(merged, ch)
}

// sample is one series of an engine's Prometheus text.
type sample struct {
	key, family, help string
	typ               dto.MetricType
	labelNames        []string
	labelValues       []string
	zone              string  // the `zone` label of a weir_zone_* or weir_cluster_* family
	value             float64 // a histogram's: its sum
	// A histogram's count and cumulative counts per upper bound (not +Inf).
	count   uint64
	buckets map[float64]uint64
}

// engineSamples parses the engine's own rendering (the caller holds the engine alive).
func engineSamples(e *engine) []sample {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(e.prometheus()))
	if err != nil {
		return nil // cannot happen: the tests parse every rendering strictly
	}
	var out []sample
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			s := sample{family: name, help: f.GetHelp(), typ: f.GetType()}
			var key strings.Builder
			key.WriteString(name)
			for _, l := range m.GetLabel() { // sorted by name
				s.labelNames = append(s.labelNames, l.GetName())
				s.labelValues = append(s.labelValues, l.GetValue())
				key.WriteString("\x00" + l.GetName() + "=" + l.GetValue())
				if l.GetName() == "zone" && (strings.HasPrefix(name, zoneFamilyPrefix) || strings.HasPrefix(name, clusterFamilyPrefix)) {
					s.zone = l.GetValue()
				}
			}
			s.key = key.String()
			switch s.typ {
			case dto.MetricType_COUNTER:
				s.value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s.value = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				s.value, s.count = h.GetSampleSum(), h.GetSampleCount()
				s.buckets = map[float64]uint64{}
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) {
						s.buckets[b.GetUpperBound()] = b.GetCumulativeCount()
					}
				}
			default:
				s.value = m.GetUntyped().GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// regionOf is the pooled region smp is read from ("" for none: the engine's own memory).
func (s *engineState) regionOf(smp sample) string {
	if s.held == nil {
		return ""
	}
	switch {
	case strings.HasPrefix(smp.family, zoneFamilyPrefix):
		return s.held.zones[smp.zone]
	case strings.HasPrefix(smp.family, clusterFamilyPrefix):
		return s.held.clusters[smp.zone]
	default:
		return s.held.counters
	}
}

// registerMetrics registers the collector in the config's registry, once: an unchecked
// collector registered twice would report every series twice (which fails the scrape).
func registerMetrics(ctx caddy.Context) {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return
	}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	for w := range hub.registered {
		if w.Value() == nil { // an unloaded config's registry
			delete(hub.registered, w)
		}
	}
	w := weak.Make(reg)
	if _, ok := hub.registered[w]; ok {
		return
	}
	if err := reg.Register(hub); err == nil {
		hub.registered[w] = struct{}{}
	}
}

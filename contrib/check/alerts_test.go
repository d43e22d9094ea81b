package main

// The alerts evaluated by Prometheus's own engine on made-up series: each fires on the
// incident it is written for, and stays quiet on healthy series, on a condition that has not
// yet lasted its `for`, and on what only looks like the incident.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/storage"
)

// Every series below has a sample each minute from 0 to 60; alerts are evaluated at 60m.
const evalAt = 60 * time.Minute

// flap repeats values (memStore's notation) until minute 60: `flap("0 3")` is
// 0 3 0 3 … (61 samples).
func flap(values string) string {
	var out []string
	v := strings.Fields(values)
	for i := 0; i <= 60; i++ {
		out = append(out, v[i%len(v)])
	}
	return strings.Join(out, " ")
}

// queueWaits writes a queue-wait histogram's _bucket series for one instance: every minute,
// `perMinute` more requests that waited `wait` seconds (0: nothing waits).
func queueWaits(instance string, perMinute int, wait float64) string {
	var b strings.Builder
	for _, le := range []string{"0.005", "0.01", "0.1", "0.5", "1", "2.5", "+Inf"} {
		n := 0
		if perMinute > 0 && (le == "+Inf" || parseFloat(le) >= wait) {
			n = perMinute
		}
		fmt.Fprintf(&b, "  weir_concurrency_queue_wait_seconds_bucket{job=\"web\",instance=%q,limit=\"backend\",le=%q} 0+%dx60\n", instance, le, n)
	}
	return b.String()
}

func parseFloat(s string) float64 {
	var f float64
	fmt.Sscan(s, &f)
	return f
}

// The alerts and the series each is evaluated on; fire lists the label sets (without job,
// which every series has as "web") of the alerts that must fire, no more.
var alertCases = map[string]struct {
	series string
	fire   []string
}{
	"WeirLimitRejectingMany": {`
  weir_limit_requests_total{job="web",limit="crawled",verdict="passed"} 0+600x60
  weir_limit_requests_total{job="web",limit="crawled",verdict="rejected"} 0+600x60
  weir_limit_requests_total{job="web",limit="banning",verdict="passed"} 0+600x60
  weir_limit_requests_total{job="web",limit="banning",verdict="banned"} 0+600x60
  weir_limit_requests_total{job="web",limit="quiet",verdict="passed"} 0+30x60
  weir_limit_requests_total{job="web",limit="quiet",verdict="rejected"} 0+30x60
  weir_limit_requests_total{job="web",limit="fine",verdict="passed"} 0+6000x60
  weir_limit_requests_total{job="web",limit="fine",verdict="rejected"} 0+120x60
  weir_limit_requests_total{job="web",limit="queueing",verdict="passed"} 0+600x60
  weir_limit_requests_total{job="web",limit="queueing",verdict="queued"} 0+6000x60
  weir_limit_requests_total{job="web",limit="recent",verdict="passed"} 0+600x60
  weir_limit_requests_total{job="web",limit="recent",verdict="rejected"} 0x54 600+600x6
`, []string{`{limit="banning"}`, `{limit="crawled"}`}},

	"WeirLimitDryRunWouldReject": {`
  weir_limit_requests_total{job="web",limit="trial",verdict="dry_run_rejected"} 0+600x60
  weir_limit_requests_total{job="web",limit="trial-quiet",verdict="dry_run_rejected"} 0+30x60
  weir_limit_requests_total{job="web",limit="enforced",verdict="rejected"} 0+600x60
`, []string{`{limit="trial"}`}},

	"WeirConcurrencySaturated": {`
  weir_concurrency_in_flight{job="web",instance="full",limit="backend"} 19x60
  weir_concurrency_limit{job="web",instance="full",limit="backend"} 20x60
  weir_concurrency_in_flight{job="web",instance="half",limit="backend"} 10x60
  weir_concurrency_limit{job="web",instance="half",limit="backend"} 20x60
  weir_concurrency_in_flight{job="web",instance="shrunk",limit="backend"} 10x60
  weir_concurrency_limit{job="web",instance="shrunk",limit="backend"} 40x45 10x15
  weir_concurrency_in_flight{job="web",instance="burst",limit="backend"} 5x55 20x5
  weir_concurrency_limit{job="web",instance="burst",limit="backend"} 20x60
`, []string{`{instance="full", limit="backend"}`, `{instance="shrunk", limit="backend"}`}},

	"WeirQueueStanding": {`
  weir_concurrency_queued{job="web",instance="standing",limit="backend"} 3x60
  weir_concurrency_queued{job="web",instance="bursty",limit="backend"} ` + flap("0 3") + `
  weir_concurrency_queued{job="web",instance="empty",limit="backend"} 0x60
`, []string{`{instance="standing", limit="backend"}`}},

	"WeirQueueWaitHigh": {"\n" + queueWaits("slow", 100, 2) + queueWaits("fast", 100, 0.008) + queueWaits("idle", 0, 0),
		[]string{`{instance="slow", limit="backend"}`}},

	"WeirCriticalLaneShed": {`
  weir_concurrency_shed_total{job="web",instance="refusing",limit="backend",lane="critical"} 0x57 1 2 2
  weir_concurrency_shed_total{job="web",instance="refusing",limit="backend",lane="normal"} 0+100x60
  weir_concurrency_shed_total{job="web",instance="shedding",limit="backend",lane="sheddable"} 0+100x60
  weir_concurrency_shed_total{job="web",instance="shedding",limit="backend",lane="critical"} 0x60
  weir_concurrency_shed_total{job="web",instance="restarted",limit="backend",lane="critical"} 5x30 0x30
`, []string{`{instance="refusing", lane="critical", limit="backend"}`}},

	"WeirLearnedLimitCollapsed": {`
  weir_concurrency_limit{job="web",instance="collapsed",limit="backend"} 40x40 4x20
  weir_concurrency_limit{job="web",instance="fixed",limit="backend"} 20x60
  weir_concurrency_limit{job="web",instance="dipped",limit="backend"} 40x50 4x5 40x4
`, []string{`{instance="collapsed", limit="backend"}`}},

	"WeirBackendLatencyHigh": {`
  weir_concurrency_noload_latency_seconds{job="web",instance="slow",limit="backend"} 0.05x60
  weir_concurrency_latency_seconds{job="web",instance="slow",limit="backend"} 0.2x60
  weir_concurrency_noload_latency_seconds{job="web",instance="busy",limit="backend"} 0.05x60
  weir_concurrency_latency_seconds{job="web",instance="busy",limit="backend"} 0.08x60
  weir_concurrency_noload_latency_seconds{job="web",instance="learning",limit="backend"} 0x60
  weir_concurrency_latency_seconds{job="web",instance="learning",limit="backend"} 0.2x60
`, []string{`{instance="slow", limit="backend"}`}},

	"WeirZoneNearlyFull": {`
  weir_zone_occupancy{job="web",instance="a",zone="per-ip"} 950x60
  weir_zone_capacity{job="web",instance="a",zone="per-ip"} 1000x60
  weir_zone_occupancy{job="web",instance="a",zone="sessions"} 500x60
  weir_zone_capacity{job="web",instance="a",zone="sessions"} 1000x60
`, []string{`{instance="a", zone="per-ip"}`}},

	"WeirZoneEvictingActiveStates": {`
  weir_zone_evictions_active_total{job="web",instance="a",zone="per-ip"} 0+10x60
  weir_zone_evictions_active_total{job="web",instance="a",zone="sessions"} 0x60
  weir_zone_evictions_active_total{job="web",instance="a",zone="once"} 0x50 5x10
`, []string{`{instance="a", zone="per-ip"}`}},

	"WeirClusterFallback": {`
  weir_cluster_fallback_active{job="web",instance="a",zone="global"} 0x50 1x10
  weir_cluster_fallback_active{job="web",instance="a",zone="recovered"} 0x50 1x5 0x4
  weir_cluster_fallback_active{job="web",instance="a",zone="just-now"} 0x59 1
`, []string{`{instance="a", zone="global"}`}},

	"WeirClusterSyncErrors": {`
  weir_cluster_sync_errors_total{job="web",instance="a",zone="flaky"} 0+1x60
  weir_cluster_fallback_active{job="web",instance="a",zone="flaky"} 0x60
  weir_cluster_sync_errors_total{job="web",instance="a",zone="down"} 0+1x60
  weir_cluster_fallback_active{job="web",instance="a",zone="down"} 1x60
  weir_cluster_sync_errors_total{job="web",instance="a",zone="healthy"} 0x60
  weir_cluster_fallback_active{job="web",instance="a",zone="healthy"} 0x60
`, []string{`{instance="a", zone="flaky"}`}},
}

// firing evaluates an alert as Prometheus's rule manager does, once a minute: the series for
// which expr held at every evaluation from evalAt - for to evalAt, as alert label sets
// (without the metric's name and the job).
func firing(t *testing.T, st storage.Queryable, expr string, forDuration time.Duration) []string {
	t.Helper()
	engine := newEngine()
	start, end := time.Unix(0, 0).Add(evalAt-forDuration), time.Unix(0, 0).Add(evalAt)
	q, err := engine.NewRangeQuery(context.Background(), st, nil, expr, start, end, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	m, err := res.Matrix()
	if err != nil {
		t.Fatal(err)
	}
	steps := int(forDuration/time.Minute) + 1
	var out []string
	for _, s := range m {
		if len(s.Floats) == steps {
			out = append(out, labels.NewBuilder(s.Metric).Del(labels.MetricName, "job").Labels().String())
		}
	}
	slices.Sort(out)
	return out
}

func TestEveryAlertFiresOnItsIncidentOnly(t *testing.T) {
	groups, errs := parseRules(rulesFile)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var rules []rulefmt.Rule
	for _, g := range groups.Groups {
		rules = append(rules, g.Rules...)
	}
	for _, r := range rules {
		t.Run(r.Alert, func(t *testing.T) {
			c, ok := alertCases[r.Alert]
			if !ok {
				t.Fatalf("no case in alertCases: give every alert series it fires on and series it must not")
			}
			st := memStore(t, c.series)
			got := firing(t, st, r.Expr, time.Duration(r.For))
			if !slices.Equal(got, c.fire) {
				t.Errorf("firing %v, want %v", got, c.fire)
			}
		})
	}
	if len(rules) != len(alertCases) {
		t.Errorf("%d alerts, %d cases: a case names an alert the rules no longer have", len(rules), len(alertCases))
	}
}

// A fleet under load in every way the dashboard shows: every panel's query, with its
// variables set to "All", must return series (a misspelt label value or label returns none).
const busyFleet = `
  weir_limit_requests_total{job="web",instance="a",limit="api",verdict="passed"} 0+600x60
  weir_limit_requests_total{job="web",instance="a",limit="api",verdict="rejected"} 0+60x60
  weir_limit_requests_total{job="web",instance="a",limit="api",verdict="banned"} 0+6x60
  weir_limit_requests_total{job="web",instance="a",limit="backend",verdict="queued"} 0+60x60
  weir_concurrency_limit{job="web",instance="a",limit="backend"} 20x60
  weir_concurrency_in_flight{job="web",instance="a",limit="backend"} 18x60
  weir_concurrency_queued{job="web",instance="a",limit="backend"} 2x60
  weir_concurrency_noload_latency_seconds{job="web",instance="a",limit="backend"} 0.05x60
  weir_concurrency_latency_seconds{job="web",instance="a",limit="backend"} 0.08x60
  weir_concurrency_shed_total{job="web",instance="a",limit="backend",lane="sheddable"} 0+30x60
  weir_concurrency_shed_total{job="web",instance="a",limit="backend",lane="normal"} 0+3x60
  weir_concurrency_shed_total{job="web",instance="a",limit="backend",lane="critical"} 0x60
  weir_zone_occupancy{job="web",instance="a",zone="per-ip"} 800x60
  weir_zone_capacity{job="web",instance="a",zone="per-ip"} 1000x60
  weir_zone_evictions_active_total{job="web",instance="a",zone="per-ip"} 0+1x60
  weir_cluster_fallback_active{job="web",instance="a",zone="per-ip"} 0x60
  weir_cluster_syncs_total{job="web",instance="a",zone="per-ip"} 0+60x60
  weir_cluster_sync_errors_total{job="web",instance="a",zone="per-ip"} 0+1x60
  weir_cluster_fallback_decisions_total{job="web",instance="a",zone="per-ip"} 0+5x60
`

func TestEveryDashboardQueryReturnsSeries(t *testing.T) {
	d, err := readDashboard(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	st := memStore(t, busyFleet+queueWaits("a", 100, 0.2))
	engine := newEngine()
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				expr, err := expandVariables(tg.Expr, vars)
				if err != nil {
					t.Fatal(err)
				}
				q, err := engine.NewInstantQuery(context.Background(), st, nil, expr, time.Unix(0, 0).Add(evalAt))
				if err != nil {
					t.Fatal(err)
				}
				v, err := q.Exec(context.Background()).Vector()
				if err != nil || len(v) == 0 {
					t.Errorf("panel %q, query %s: no series (%v): %s", p.Title, tg.RefID, err, expr)
				}
				q.Close()
			}
		}
	}
	walk(d.Panels)
}

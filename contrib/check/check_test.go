package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The repository's files, from this package's directory.
const (
	metricsDoc    = "../../docs/METRICS.md"
	rulesFile     = "../prometheus/weir-alerts.yml"
	dashboardFile = "../grafana/weir-dashboard.json"
)

func repoFamilies(t *testing.T) families {
	t.Helper()
	fs, err := readFamilies(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestMetricsReferenceListsEveryFamilyGroup(t *testing.T) {
	fs := repoFamilies(t)
	want := map[string]string{
		"weir_requests_total":                     "counter",
		"weir_limit_requests_total":               "counter",
		"weir_zone_occupancy":                     "gauge",
		"weir_zone_evictions_active_total":        "counter",
		"weir_cluster_fallback_active":            "gauge",
		"weir_concurrency_limit":                  "gauge",
		"weir_concurrency_in_flight":              "gauge",
		"weir_concurrency_queued":                 "gauge",
		"weir_concurrency_noload_latency_seconds": "gauge",
		"weir_concurrency_latency_seconds":        "gauge",
		"weir_concurrency_shed_total":             "counter",
		"weir_concurrency_queue_wait_seconds":     "histogram",
	}
	for name, kind := range want {
		if f, ok := fs[name]; !ok || f.kind != kind {
			t.Errorf("%s: got %+v, want a %s", name, f, kind)
		}
	}
	if s, err := fs.lookup("weir_concurrency_queue_wait_seconds_bucket"); err != nil || s.part != "bucket" {
		t.Errorf("the histogram's _bucket series: %+v, %v", s, err)
	}
	for _, name := range []string{"weir_concurrency_queue_wait_seconds", "weir_zone_occupancy_bucket", "weir_nope"} {
		if _, err := fs.lookup(name); err == nil {
			t.Errorf("%s accepted as a series weir exports", name)
		}
	}
}

func TestRepositoryRulesAndDashboardPass(t *testing.T) {
	fs := repoFamilies(t)
	for _, path := range []string{rulesFile, dashboardFile} {
		for _, err := range checkFile(path, fs) {
			t.Error(err)
		}
	}
}

// The dashboard has what operators are promised (docs/METRICS.md, contrib/README.md).
func TestDashboardShowsWhatTheDocsPromise(t *testing.T) {
	d, err := readDashboard(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion != 39 {
		t.Errorf("schemaVersion %d", d.SchemaVersion)
	}
	var limitVar *variable
	for i, v := range d.Templating.List {
		if v.Name == "limit" {
			limitVar = &d.Templating.List[i]
		}
	}
	if limitVar == nil {
		t.Fatal("no templating variable limit")
	}
	if q, _ := limitVar.Query.(map[string]any)["query"].(string); q != "label_values(weir_limit_requests_total, limit)" {
		t.Errorf("variable limit: query %q", q)
	}
	var exprs strings.Builder
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs.WriteString(tg.Expr + "\n")
		}
	}
	for _, name := range []string{
		"weir_limit_requests_total", "weir_concurrency_limit", "weir_concurrency_in_flight",
		"weir_concurrency_queued", "weir_concurrency_queue_wait_seconds_bucket",
		"weir_concurrency_noload_latency_seconds", "weir_concurrency_latency_seconds",
		"weir_concurrency_shed_total", "weir_zone_occupancy", "weir_zone_capacity",
		"weir_cluster_fallback_active", "weir_cluster_sync_errors_total",
	} {
		if !strings.Contains(exprs.String(), name+"{") {
			t.Errorf("no panel shows %s", name)
		}
	}
}

// Every query docs/METRICS.md shows (```promql blocks, and `query:` lines of its YAML) parses
// and names families weir exports.
func TestQueriesInTheMetricsReferenceParse(t *testing.T) {
	fs := repoFamilies(t)
	data, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	var queries []string
	block := ""
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "```") && block == "":
			block = strings.TrimPrefix(line, "```")
		case strings.HasPrefix(line, "```"):
			block = ""
		case block == "promql" && strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "#"):
			queries = append(queries, line)
		case block == "yaml" && strings.HasPrefix(strings.TrimSpace(line), "query: "):
			queries = append(queries, strings.TrimPrefix(strings.TrimSpace(line), "query: "))
		}
	}
	if len(queries) < 5 {
		t.Fatalf("found %d queries in %s", len(queries), metricsDoc)
	}
	for _, q := range queries {
		if err := checkExpr(q, fs); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// mutate writes a copy of the file at src with one replacement made (which must apply).
func mutate(t *testing.T, src, old, new string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s does not contain %q", src, old)
	}
	path := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func expectError(t *testing.T, errs []error, want string) {
	t.Helper()
	var all []string
	for _, e := range errs {
		if e != nil {
			all = append(all, e.Error())
		}
	}
	if !regexp.MustCompile(want).MatchString(strings.Join(all, "\n")) {
		t.Errorf("want an error matching %q, got %q", want, all)
	}
}

func TestBrokenRulesFail(t *testing.T) {
	fs := repoFamilies(t)
	for _, c := range []struct{ name, old, new, want string }{
		{"unknown metric", "weir_concurrency_queued > 0", "weir_concurrency_queue > 0", "weir_concurrency_queue is not a family weir exports"},
		{"PromQL syntax", "weir_zone_occupancy / weir_zone_capacity > 0.9", "weir_zone_occupancy / / weir_zone_capacity", "could not parse expression"},
		{"unknown function", "histogram_quantile(0.99,", "histogram_quantil(0.99,", "could not parse expression"},
		{"bad duration", "for: 15m", "for: 15 minutes", "duration"},
		{"unknown field", "    rules:\n      - alert: WeirZoneNearlyFull", "    rules:\n      - alert: WeirZoneNearlyFull\n        severity: warning", "field severity not found"},
		{"annotation template", "{{ $labels.zone }} on {{ $labels.instance }} is", "{{ $labels.zone  on", "annotation"},
		{"counter read raw", "rate(weir_zone_evictions_active_total[5m]) > 0", "weir_zone_evictions_active_total > 0", "only grows"},
		{"gauge through rate", "weir_concurrency_queued > 0", "rate(weir_concurrency_queued[5m]) > 0", "is a gauge"},
		{"histogram base name", "weir_concurrency_queue_wait_seconds_bucket[5m]", "weir_concurrency_queue_wait_seconds[5m]", "is a histogram"},
		{"name by pattern", "weir_cluster_fallback_active == 1\n        for: 2m", "{__name__=~\"weir_cluster_.*\"} == 1\n        for: 2m", "not by a pattern"},
		{"no severity", "  severity: critical", "  team: web", "severity must be"},
		{"unknown severity", "  severity: critical", "  severity: page", "severity must be"},
		{"no description", "      - alert: WeirQueueStanding", "      - alert: WeirQueueStandingCopy\n        expr: weir_concurrency_queued > 10\n        labels: {severity: info}\n        annotations: {summary: s}\n      - alert: WeirQueueStanding", "no description annotation"},
		{"duplicate alert", "alert: WeirClusterSyncErrors", "alert: WeirClusterFallback", "used again"},
		{"recording rule", "      - alert: WeirQueueStanding", "      - record: weir:queued\n        expr: sum(weir_concurrency_queued)\n      - alert: WeirQueueStanding", "only alerting rules"},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectError(t, checkRules(mutate(t, rulesFile, c.old, c.new), fs), c.want)
		})
	}
}

func TestBrokenDashboardsFail(t *testing.T) {
	fs := repoFamilies(t)
	for _, c := range []struct{ name, old, new, want string }{
		{"not JSON", `"schemaVersion": 39,`, `"schemaVersion": 39`, "not valid dashboard JSON"},
		{"text after", "\n}", "\n}\n{}", "text after"},
		{"old schema", `"schemaVersion": 39`, `"schemaVersion": 27`, "schemaVersion 27"},
		{"duplicate id", `"id": 7,`, `"id": 6,`, "has id 6, as panel"},
		{"no gridPos", `"gridPos": {"h": 8, "w": 12, "x": 12, "y": 1},`, ``, "gridPos needs h, w, x and y"},
		{"off the grid", `"gridPos": {"h": 8, "w": 12, "x": 12, "y": 1}`, `"gridPos": {"h": 8, "w": 13, "x": 12, "y": 1}`, "off the 24-column grid"},
		{"overlap", `"gridPos": {"h": 8, "w": 12, "x": 12, "y": 1}`, `"gridPos": {"h": 8, "w": 12, "x": 6, "y": 1}`, "overlaps panel"},
		{"unknown metric", `weir_zone_evictions_active_total{`, `weir_zone_evictions_total{`, "weir_zone_evictions_total is not a family"},
		{"PromQL syntax", `sum by (limit, lane) (rate(`, `sum by (limit, lane) rate(`, "does not parse as PromQL"},
		{"undefined variable", `limit=~\"$limit\"`, `limit=~\"$limits\"`, `\$limits: no such variable`},
		{"variable outside a regex matcher", `limit=~\"$limit\"`, `limit=\"$limit\"`, "matcher such as"},
		{"another datasource", `"datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}`, `"datasource": {"type": "prometheus", "uid": "prod"}`, "not prometheus/"},
		{"no input", `"name": "DS_PROMETHEUS"`, `"name": "DS_PROM"`, "__inputs has no Prometheus datasource"},
		{"variable on unknown metric", `label_values(weir_limit_requests_total, limit)",`, `label_values(weir_limits_total, limit)",`, `variable "limit": weir_limits_total is not a family`},
		{"counter read raw", `(rate(weir_cluster_syncs_total{zone=~\"$zone\", instance=~\"$instance\"}[$__rate_interval]))`, `(weir_cluster_syncs_total{zone=~\"$zone\", instance=~\"$instance\"})`, "only grows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectError(t, checkDashboard(mutate(t, dashboardFile, c.old, c.new), fs), c.want)
		})
	}
}

func TestBrokenMetricsReferenceFails(t *testing.T) {
	for _, c := range []struct{ name, old, new, want string }{
		{"unknown type", "| `weir_concurrency_queued` | gauge |", "| `weir_concurrency_queued` | gaug |", `unknown type "gaug"`},
		{"counter without _total", "| `weir_zone_inserts_total` | counter |", "| `weir_zone_inserts` | counter |", "does not end in _total"},
		{"listed twice", "| `weir_zone_inserts_total` | counter |", "| `weir_zone_capacity` | gauge |", "listed twice"},
		{"not a name", "| `weir_zone_inserts_total` | counter |", "| weir_zone_inserts_total | counter |", "not a weir family name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := readFamilies(mutate(t, metricsDoc, c.old, c.new))
			expectError(t, []error{err}, c.want)
		})
	}
}

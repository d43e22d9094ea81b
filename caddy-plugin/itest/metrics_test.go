package itest

import (
	"strings"
	"testing"
)

// Three weir handlers: /a and /b with the same policy file (one pooled engine) and an inline
// zone z of other parameters each (two engines, two tables); /c with /a's zone z (the same
// table: a zone's table is pooled by name and parameters) and another zone (a third engine).
const twoHandlersCfg = `%GLOBALS%
:%PORT% {
	handle /a {
		weir {
			policy %DIR%/p.toml
			zone z {
				key static
				events 1
				window 1h
			}
		}
		respond "a"
	}
	handle /b {
		weir {
			policy %DIR%/p.toml
			zone z {
				key static
				events 2
				window 1h
			}
		}
		respond "b"
	}
	handle /c {
		weir {
			zone z {
				key static
				events 1
				window 1h
			}
			zone y {
				key static
				events 5
				window 1h
			}
		}
		respond "c"
	}
}
`

// TestMetricsEveryHandler: Caddy's admin /metrics serves the engine's own families (the names
// nginx and the tower layer serve) for every engine of every handler, each series once.
func TestMetricsEveryHandler(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	dir := t.TempDir()
	writePolicy(t, dir, "1r/h") // limit pg: 3 requests (1 + burst 2)
	s := startCaddy(t, bin, "caddyfile", strings.ReplaceAll(twoHandlersCfg, "%DIR%", dir))
	for _, c := range []struct {
		path   string
		status int
	}{{"/a", 200}, {"/a", 429}, {"/b", 200}, {"/b", 200}, {"/b", 429}, {"/c", 429}} {
		if r := get(t, s.port, c.path); r.status != c.status {
			t.Fatalf("%s: %d, want %d", c.path, r.status, c.status)
		}
	}
	got := s.samples()
	checkSamples(t, "two handlers", got, map[string]float64{
		// One series over the three engines' limits named z (1 + 2 passed, 1 + 1 + 1
		// rejected) …
		`weir_limit_requests_total{limit="z",verdict="passed"}`:   3,
		`weir_limit_requests_total{limit="z",verdict="rejected"}`: 3,
		// … and over the two tables named z, /a's and /c's counted once (1 + 1 keys; 2 + 1
		// rejections) …
		`weir_zone_inserts_total{zone="z"}`:  2,
		`weir_zone_rejected_total{zone="z"}`: 3,
		// … and one pooled policy engine, which sees the requests the zones passed.
		`weir_limit_requests_total{limit="pg",verdict="passed"}`: 3,
	})
	for _, family := range []string{"weir_requests_total", "weir_zone_capacity"} {
		found := false
		for k := range got {
			found = found || k == family || strings.HasPrefix(k, family+"{")
		}
		if !found {
			t.Errorf("no %s series in:\n%s", family, grepLines(string(s.metrics()), "weir"))
		}
	}
	s.assertAlive()
}

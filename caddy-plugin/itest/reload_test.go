package itest

import (
	"strconv"
	"strings"
	"testing"
)

// Reloads keep every zone whose layout did not change, as nginx does (docs/CADDY.md,
// "Reloads"): its keys, rate states and bans, and a policy's counters while its limits stay.

const keepPolicy = `# %COMMENT%
zones.g = { size = "64k", algorithm = "gcra", rate = "%RATE%" }
zones.s = { size = "%SSIZE%", algorithm = "sliding", events = 1, window = "1h" }
zones.b = { size = "64k", algorithm = "gcra", rate = "1r/s" }
classes.g = { match = [{ path_prefix = "/g/" }] }
classes.s = { match = [{ path_prefix = "/s/" }] }
classes.b = { match = [{ path_prefix = "/b/" }] }
limit = [
    { name = "g", class = "g", zone = "g", key = "global", nodelay = true },
    { name = "s", class = "s", zone = "s", key = "global" },
    { name = "b", class = "b", zone = "b", key = "global", nodelay = true,
      ban = { after = 1, within = "1m", duration = "1h" } },
]
`

const policyCfg = `%GLOBALS%
:%PORT% {
	weir {
		policy %DIR%/p.toml
	}
	respond "ok"
}
`

// expectStatus sends GET path and fails the test unless the answer has status want.
func expectStatus(t *testing.T, port int, where, path string, want int) response {
	t.Helper()
	r := getAfterReload(t, port, path)
	if r.status != want {
		t.Fatalf("%s: GET %s: %d, want %d", where, path, r.status, want)
	}
	return r
}

// expectBanned checks that path is refused by a ban (Retry-After: what is left of an hour),
// not by the zone's rate of 1r/s (Retry-After: 1).
func expectBanned(t *testing.T, port int, where, path string) {
	t.Helper()
	r := expectStatus(t, port, where, path, 429)
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 600 {
		t.Fatalf("%s: GET %s: Retry-After %q, want the ban's (about 3600)", where, path, r.header.Get("Retry-After"))
	}
}

// TestReloadPolicyEditKeepsZones: editing the policy file (a comment, a GCRA rate) keeps every
// zone's state, bans included, and the counters; a zone whose size changed starts empty while
// the others keep theirs.
func TestReloadPolicyEditKeepsZones(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	s := startCaddy(t, bin, "caddyfile", "%GLOBALS%\n:%PORT% {\n\trespond \"starting\"\n}\n")
	policy := func(comment, rate, ssize string) {
		writeFile(t, s.dir, "p.toml", strings.NewReplacer("%COMMENT%", comment, "%RATE%", rate, "%SSIZE%", ssize).Replace(keepPolicy))
	}
	policy("v1", "1r/h", "64k")
	s.reload("caddyfile", policyCfg)
	expectStatus(t, s.port, "first", "/g/", 200)
	expectStatus(t, s.port, "first", "/g/", 429)
	expectStatus(t, s.port, "first", "/s/", 200)
	expectStatus(t, s.port, "first", "/s/", 429)
	expectStatus(t, s.port, "first", "/b/", 200)
	expectBanned(t, s.port, "first", "/b/") // the first rejection starts the ban

	policy("v2: only this comment changed", "1r/h", "64k")
	s.reload("caddyfile", policyCfg)
	expectStatus(t, s.port, "comment edited", "/g/", 429)
	expectStatus(t, s.port, "comment edited", "/s/", 429)
	expectBanned(t, s.port, "comment edited", "/b/")

	// A GCRA rate change keeps each key's excess (half an hour left at 2r/h).
	policy("v3", "2r/h", "64k")
	s.reload("caddyfile", policyCfg)
	r := expectStatus(t, s.port, "rate changed", "/g/", 429)
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 600 {
		t.Errorf("rate changed: Retry-After %q, want about 1800", r.header.Get("Retry-After"))
	}
	expectBanned(t, s.port, "rate changed", "/b/")

	// A changed size is another layout: that zone starts empty, the others keep their state.
	policy("v4", "2r/h", "128k")
	s.reload("caddyfile", policyCfg)
	expectStatus(t, s.port, "s resized", "/s/", 200)
	expectStatus(t, s.port, "s resized", "/s/", 429)
	expectStatus(t, s.port, "s resized", "/g/", 429)
	expectBanned(t, s.port, "s resized", "/b/")
	if !strings.Contains(s.Logs(), `weir zone \"s\" starts with fresh state: its layout changed from \"sliding window=1h size=65536\" to \"sliding window=1h size=131072\"`) {
		t.Errorf("no notice of zone s starting fresh in:\n%s", s.Logs())
	}

	// The limits never changed: one counter block throughout, each request counted once.
	checkSamples(t, "after the reloads", s.samples(), map[string]float64{
		`weir_limit_requests_total{limit="g",verdict="passed"}`:   1,
		`weir_limit_requests_total{limit="g",verdict="rejected"}`: 4,
		`weir_limit_requests_total{limit="s",verdict="passed"}`:   2,
		`weir_limit_requests_total{limit="s",verdict="rejected"}`: 3,
		`weir_limit_requests_total{limit="b",verdict="passed"}`:   1,
		`weir_limit_requests_total{limit="b",verdict="rejected"}`: 1,
		`weir_limit_requests_total{limit="b",verdict="banned"}`:   3,
		`weir_requests_total`: 15,
	})
	s.assertAlive()
}

const twoZonesPolicy = `zones.a = { size = "64k", algorithm = "gcra", rate = "1r/h" }
classes.a = { match = [{ path_prefix = "/a/" }] }
limit = [
    { name = "a", class = "a", zone = "a", key = "global", nodelay = true },
%R%]
%RZONE%`

// TestReloadRemovedZoneStartsEmpty: a zone removed by one reload and added back by the next
// starts empty (nothing held it in between); the zone kept throughout keeps its state, and the
// counters start from zero when the limits change.
func TestReloadRemovedZoneStartsEmpty(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	s := startCaddy(t, bin, "caddyfile", "%GLOBALS%\n:%PORT% {\n\trespond \"starting\"\n}\n")
	policy := func(withR bool) {
		text := strings.NewReplacer("%R%", "", "%RZONE%", "").Replace(twoZonesPolicy)
		if withR {
			text = strings.NewReplacer(
				"%R%", "    { name = \"r\", class = \"r\", zone = \"r\", key = \"global\", nodelay = true },\n",
				"%RZONE%", "zones.r = { size = \"64k\", algorithm = \"gcra\", rate = \"1r/h\" }\nclasses.r = { match = [{ path_prefix = \"/r/\" }] }\n",
			).Replace(twoZonesPolicy)
		}
		writeFile(t, s.dir, "p.toml", text)
	}
	policy(true)
	s.reload("caddyfile", policyCfg)
	for _, p := range []string{"/a/", "/r/"} {
		expectStatus(t, s.port, "first", p, 200)
		expectStatus(t, s.port, "first", p, 429)
	}
	policy(false)
	s.reload("caddyfile", policyCfg)
	expectStatus(t, s.port, "r removed", "/a/", 429)
	expectStatus(t, s.port, "r removed", "/r/", 200) // no class: not limited
	policy(true)
	s.reload("caddyfile", policyCfg)
	expectStatus(t, s.port, "r added back", "/a/", 429)
	expectStatus(t, s.port, "r added back", "/r/", 200)
	expectStatus(t, s.port, "r added back", "/r/", 429)
	if n := strings.Count(s.Logs(), "weir counters start from zero: the policy's limits changed"); n != 2 {
		t.Errorf("%d notices of the counters starting from zero, want 2 (one per change of the limits):\n%s", n, s.Logs())
	}
	s.assertAlive()
}

// inlineCfg: handler one has zones g (GCRA) and l (an exact log), handler two a zone l of the
// same parameters, which shares l's table (inline zones are shared by name, as
// caddy-ratelimit's are).
const inlineCfg = `%GLOBALS%
:%PORT% {
	route /one/* {
		weir {
			zone g {
				match {
					path /one/g
				}
				key static
				rate %RATE%
				%GEXTRA%
			}
			%ONEL%
		}
	}
	route /two/* {
		weir {
			%TWOL%
		}
	}
	respond "ok"
}
`

const inlineL = `zone l {
				match {
					path /one/l /two/l
				}
				key static
				events 1
				window 1h
			}`

// TestReloadInlineZonesKeepState: an inline zone keeps its state when only parameters outside
// its layout change (its rate, status, log level), while another handler still holds it, and
// starts empty when its size changes or nothing held it in between.
func TestReloadInlineZonesKeepState(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	cfg := func(rate, gextra string, oneL, twoL bool) string {
		one, two := "", "zone x {\n\t\t\t\tkey static\n\t\t\t\tevents 100\n\t\t\t\twindow 1h\n\t\t\t}"
		if oneL {
			one = inlineL
		}
		if twoL {
			two = inlineL
		}
		return strings.NewReplacer("%RATE%", rate, "%GEXTRA%", gextra, "%ONEL%", one, "%TWOL%", two).Replace(inlineCfg)
	}
	s := startCaddy(t, bin, "caddyfile", cfg("1r/h", "", true, true))
	expectStatus(t, s.port, "first", "/one/g", 200)
	expectStatus(t, s.port, "first", "/one/g", 429)
	expectStatus(t, s.port, "first", "/one/l", 200)
	expectStatus(t, s.port, "first", "/two/l", 429) // one table for both handlers

	// g's rate, status and log level changed; l removed from handler one, still in two.
	s.reload("caddyfile", cfg("2r/h", "status 503\n\t\t\t\tlog_level warn", false, true))
	expectStatus(t, s.port, "g edited", "/one/g", 503)
	expectStatus(t, s.port, "g edited", "/two/l", 429)
	expectStatus(t, s.port, "g edited", "/one/l", 200) // no zone l in handler one

	// l back in handler one: the table handler two kept; g resized: empty.
	s.reload("caddyfile", cfg("2r/h", "status 503\n\t\t\t\tsize 131072", true, true))
	expectStatus(t, s.port, "l back", "/one/l", 429)
	expectStatus(t, s.port, "g resized", "/one/g", 200)
	expectStatus(t, s.port, "g resized", "/one/g", 503)

	// l in no handler, then back: nothing held its table in between.
	s.reload("caddyfile", cfg("2r/h", "", false, false))
	s.reload("caddyfile", cfg("2r/h", "", true, true))
	expectStatus(t, s.port, "l re-added", "/two/l", 200)
	expectStatus(t, s.port, "l re-added", "/one/l", 429)
	s.assertAlive()
}

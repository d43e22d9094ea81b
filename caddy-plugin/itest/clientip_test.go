package itest

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
)

// perIPPolicy: 21 requests per address (burst 20), then one an hour.
const perIPPolicy = `[zones.ip]
size = "64k"
algorithm = "gcra"
rate = "1r/h"
[[limit]]
class = "*"
zone = "ip"
name = "per-ip"
burst = 20
nodelay = true
`

// spoofCfg: a policy keyed on the client address behind a trusted proxy (127.0.0.0/8), and
// an inline zone keyed on {client_ip}; %OPTS% completes the server options.
const spoofCfg = `{
	admin 127.0.0.1:%ADMIN%
	default_bind 127.0.0.1
	auto_https off
	servers {
		trusted_proxies static 127.0.0.0/8
		%OPTS%
	}
}
:%PORT% {
	%WEIR%
	respond "{http.weir.status}"
}
`

// TestSpoofedForwardedFor: a client behind a trusted proxy cannot pick its own key by
// prepending addresses to X-Forwarded-For. Without trusted_proxies_strict Caddy's client_ip
// is the leftmost entry (the client's own), so weir refuses such a server when it limits on
// the client address; with it, the key is the address the proxy saw.
func TestSpoofedForwardedFor(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	pol := writeFile(t, t.TempDir(), "p.toml", perIPPolicy)
	policy := "weir {\n\t\tpolicy " + pol + "\n\t}"
	zone := "weir {\n\t\tzone z {\n\t\t\tkey {client_ip}\n\t\t\trate 1r/h burst 20\n\t\t}\n\t}"
	header := "weir {\n\t\tzone z {\n\t\t\tkey {http.request.header.X-Api-Key}\n\t\t\trate 1r/h burst 20\n\t\t}\n\t}"
	cfg := func(opts, weir string) string {
		return strings.NewReplacer("%OPTS%", opts, "%WEIR%", weir).Replace(spoofCfg)
	}
	validate := func(config string) (string, error) {
		p := writeFile(t, t.TempDir(), "Caddyfile", strings.NewReplacer("%ADMIN%", "2019", "%PORT%", "8080").Replace(config))
		out, err := exec.Command(bin, "validate", "--config", p, "--adapter", "caddyfile").CombinedOutput()
		return string(out), err
	}
	for name, weir := range map[string]string{"policy": policy, "zone on client_ip": zone} {
		out, err := validate(cfg("", weir))
		if err == nil || !strings.Contains(out, "trusted_proxies_strict") {
			t.Errorf("%s behind non-strict trusted_proxies: validate err=%v, want a refusal naming trusted_proxies_strict:\n%s", name, err, out)
		}
	}
	if out, err := validate(cfg("", header)); err != nil {
		t.Errorf("a zone keyed on a header needs no client address, but validate failed: %v\n%s", err, out)
	}

	for name, weir := range map[string]string{"policy": policy, "zone on client_ip": zone} {
		t.Run(name, func(t *testing.T) {
			s := startCaddy(t, bin, "caddyfile", cfg("trusted_proxies_strict", weir))
			passed := 0
			for i := 0; i < 40; i++ {
				spoof := fmt.Sprintf("203.0.%d.%d", rand.IntN(256), 1+rand.IntN(254))
				r := get(t, s.port, "/", [2]string{"X-Forwarded-For", spoof + ", 2.2.2.2"})
				if r.status == 200 {
					passed++
				} else if r.status != 429 {
					t.Fatalf("request %d: status %d", i, r.status)
				}
			}
			if passed != 21 {
				t.Errorf("%d of 40 requests with spoofed X-Forwarded-For passed, want 21 (burst 20 for 2.2.2.2)", passed)
			}
			s.assertAlive()
		})
	}
}

package weir

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestParseRate(t *testing.T) {
	if n, p, err := parseRate("30r/m"); err != nil || n != 30 || p != uint64(time.Minute) {
		t.Errorf("30r/m: %d %d %v", n, p, err)
	}
	for _, bad := range []string{"r/s", "0r/s", "10r/w", "10/s", "x"} {
		if _, _, err := parseRate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// policyWords is the error a policy file gets for `setting = "value"` in a zone, without its
// "file:line:col: " prefix.
func policyWords(t *testing.T, setting, value string) string {
	t.Helper()
	zone := map[string]string{"rate": `algorithm = "gcra"`, "size": `algorithm = "gcra"` + "\nrate = \"1r/s\""}
	size := `size = "64k"` + "\n"
	if setting == "size" {
		size = ""
	}
	toml := fmt.Sprintf("[zones.z]\n%s%s\n%s = %q\n[[limit]]\nclass = \"*\"\nzone = \"z\"\n", size, zone[setting], setting, value)
	err := checkPolicy([]byte(toml), "p.toml")
	if err == nil {
		t.Fatalf("policy with %s %q accepted", setting, value)
	}
	loc := regexp.MustCompile(`^p\.toml:\d+:\d+: `)
	if !loc.MatchString(err.Error()) {
		t.Fatalf("policy error %q has no location", err)
	}
	return loc.ReplaceAllString(err.Error(), "")
}

// A bad rate or size gets the same words in a Caddyfile, in JSON and in a policy file: the
// plugin parses them with the policy's parser.
func TestBadValuesGetThePolicyWords(t *testing.T) {
	for _, c := range []struct{ setting, value string }{
		{"rate", "10r/w"}, {"rate", "0r/s"}, {"rate", "r/s"}, {"rate", "10/s"},
		{"rate", "2000000000r/s"}, {"size", "10mb"}, {"size", "m"}, {"size", "99999999999999999999"},
	} {
		words := policyWords(t, c.setting, c.value)
		file := "weir {\n\tzone z {\n\t\t" + c.setting + " " + c.value + "\n"
		if c.setting == "size" {
			file += "\t\trate 1r/s\n"
		}
		file += "\t}\n}\n"
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(file))
		if err == nil || !strings.Contains(err.Error(), "weir: zone z: "+words+",") {
			t.Errorf("Caddyfile %s %s: %v; want the policy's words %q", c.setting, c.value, err, words)
		}
		if c.setting == "rate" {
			_, err := zoneParamsOf("z", &Zone{Rate: c.value})
			if err == nil || err.Error() != "zone z: "+words {
				t.Errorf("JSON rate %s: %v; want the policy's words %q", c.value, err, words)
			}
		}
	}
	// The policy's size syntax in a Caddyfile.
	var h Handler
	file := "weir {\n\tzone z {\n\t\trate 1r/s\n\t\tsize 64k\n\t}\n}\n"
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(file)); err != nil || h.RateLimits["z"].Size != 64<<10 {
		t.Fatalf("size 64k: %v", err)
	}
}

const benchPolicy = `[zones.g]
size = "64m"
algorithm = "gcra"
rate = "1000000r/s"
[[limit]]
class = "*"
zone = "g"
key = "ip"
burst = 100000
nodelay = true
`

// BenchmarkPolicyEvaluate: one request through the policy engine as ServeHTTP does it
// (header packing + one cgo call), 1024 client addresses.
func BenchmarkPolicyEvaluate(b *testing.B) {
	e, err := newEngine([]byte(benchPolicy), "bench.toml")
	if err != nil {
		b.Fatal(err)
	}
	defer e.free()
	peers := make([]string, 1024)
	for i := range peers {
		peers[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	r := httptest.NewRequest("GET", "/api/items?page=2", nil)
	r.Header.Set("User-Agent", "wrk")
	r.Header.Set("Accept", "*/*")
	var hb []byte
	v := new(verdict)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hb = e.packPolicyHeaders(hb[:0], r)
		rv := reqView{method: "GET", target: "/api/items?page=2", peer: peers[i&1023], headers: hb}
		e.evaluate(&rv, nowNS(), v, false)
		if v.rc != 0 || v.action() != actPass {
			b.Fatalf("rc %d action %d", v.rc, v.action())
		}
	}
}

// The plugin copies only the headers the policy reads, every value of each, and the Host
// (which Go keeps outside r.Header) when the policy reads it.
func TestPackPolicyHeaders(t *testing.T) {
	const policy = `
[zones.keys]
size = "64k"
algorithm = "gcra"
rate = "1r/m"

[classes.shop]
match = [{ header.host = { regex = "^shop\\." } }]

[[limit]]
class = "shop"
zone = "keys"
key = ["header:X-Api-Key"]
`
	e, err := newEngine([]byte(policy), "pack.toml")
	if err != nil {
		t.Fatal(err)
	}
	defer e.free()
	r := httptest.NewRequest("GET", "http://shop.example/x", nil)
	r.Header.Add("X-Api-Key", "k1")
	r.Header.Add("X-Api-Key", "k2")
	r.Header.Set("User-Agent", "ua")
	r.Header.Set("Cookie", "session=1")
	got := e.packPolicyHeaders(nil, r)
	want := packHeaders(nil, "host", "shop.example")
	want = packHeaders(want, "x-api-key", "k1")
	want = packHeaders(want, "x-api-key", "k2")
	if !bytes.Equal(got, want) {
		t.Fatalf("packed %q, want %q", got, want)
	}
	// The class matches on the packed Host: the second request with the same key is rejected.
	rv := reqView{method: "GET", target: "/x", peer: "192.0.2.1", headers: got}
	v := new(verdict)
	for i := 0; i < 2; i++ {
		e.evaluate(&rv, nowNS(), v, false)
	}
	if v.rc != 0 || v.action() != actReject || v.limit() != 0 {
		t.Fatalf("rc %d action %d limit %d, want the shop limit to reject", v.rc, v.action(), v.limit())
	}
}

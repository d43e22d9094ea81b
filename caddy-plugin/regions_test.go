package weir

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

func retryAfter(h http.Header) int {
	n, _ := strconv.Atoi(h.Get("Retry-After"))
	return n
}

// heldRegions counts the pooled regions whose owner starts with prefix.
func heldRegions(prefix string) int {
	n := 0
	regions.Range(func(_, v any) bool {
		if r, ok := v.(*region); ok && strings.HasPrefix(r.owner, prefix) {
			n++
		}
		return true
	})
	return n
}

// TestRegionsFollowConfigs: a config provisioned over an edited policy file while the old one
// still runs (Caddy's order) attaches to the same zone and counter regions, so a limited key
// stays limited after the old config's cleanup; the last cleanup unmaps every region.
func TestRegionsFollowConfigs(t *testing.T) {
	const text = "# %s\nzones.z = { size = \"64k\", algorithm = \"gcra\", rate = \"1r/h\" }\n" +
		"limit = [{ name = \"l\", class = \"*\", zone = \"z\", key = \"global\", nodelay = true,\n" +
		"    ban = { after = 1, within = \"1m\", duration = \"1h\" } }]\n"
	old := policyHandlerFor(t, strings.Replace(text, "%s", "v1", 1))
	cleanOld := provisioned(t, old)
	owner := "policy " + old.Policy
	if n := heldRegions(owner); n != 2 {
		t.Fatalf("%d regions for one zone and the counters", n)
	}
	for i, want := range []int{200, 429, 429} {
		if status, _, _ := serveZone(t, old, nextOK); status != want {
			t.Fatalf("request %d: %d, want %d", i, status, want)
		}
	}
	if err := os.WriteFile(old.Policy, []byte(strings.Replace(text, "%s", "v2", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	edited := &Handler{Policy: old.Policy}
	cleanEdited := provisioned(t, edited)
	if edited.policy == old.policy {
		t.Fatal("an edited policy file kept its engine")
	}
	cleanOld()
	if n := heldRegions(owner); n != 2 {
		t.Fatalf("%d regions after the old config's cleanup, want 2 (kept)", n)
	}
	if status, _, hdr := serveZone(t, edited, nextOK); status != 429 || retryAfter(hdr) < 3000 {
		t.Fatalf("after the edit: %d Retry-After %q, want the ban's 429", status, hdr.Get("Retry-After"))
	}
	cleanEdited()
	if n := heldRegions(owner); n != 0 {
		t.Fatalf("%d regions left after the last cleanup", n)
	}
}

package itest

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestValidateLargeZonesCostNoMemory: `caddy validate` builds the zones' tables, and a table's
// pages are touched only when keys land in them, so 1 GiB zones (a Caddyfile zone and a policy
// zone) keep validation's peak memory far below their size.
func TestValidateLargeZonesCostNoMemory(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	dir := t.TempDir()
	policy := "[zones.p]\nsize = \"1g\"\nalgorithm = \"gcra\"\nrate = \"10r/s\"\n" +
		"[[limit]]\nclass = \"*\"\nzone = \"p\"\n"
	if err := os.WriteFile(filepath.Join(dir, "p.toml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	caddyfile := ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\tevents 10\n\t\t\twindow 1m\n" +
		"\t\t\tsize 1073741824\n\t\t}\n\t\tpolicy " + dir + "/p.toml\n\t}\n\trespond ok\n}\n"
	p := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(p, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "validate", "--config", p, "--adapter", "caddyfile")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	peakKiB := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
	if peakKiB > 200<<10 {
		t.Errorf("caddy validate with two 1 GiB zones peaked at %d MiB", peakKiB>>10)
	}
	t.Logf("caddy validate with two 1 GiB zones: peak %d MiB", peakKiB>>10)
}

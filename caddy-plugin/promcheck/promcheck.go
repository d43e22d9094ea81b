// Package promcheck checks Prometheus text exposition (format 0.0.4) strictly: it must parse
// with expfmt (what Prometheus' promtool and Telegraf read it with), and every metric family
// must have exactly one # HELP and one # TYPE line, before all its samples, which follow each
// other without another family in between.
package promcheck

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Check returns the first problem found in text, or nil.
func Check(text []byte) error {
	p := expfmt.NewTextParser(model.LegacyValidation)
	if _, err := p.TextToMetricFamilies(bytes.NewReader(text)); err != nil {
		return fmt.Errorf("expfmt: %w", err)
	}
	help := map[string]bool{}
	kind := map[string]string{}
	done := map[string]bool{} // families whose samples are over
	current := ""
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && (f[1] == "HELP" || f[1] == "TYPE") {
			name := f[2]
			seen := help[name]
			if f[1] == "TYPE" {
				_, seen = kind[name]
			}
			if seen || done[name] {
				return fmt.Errorf("line %d: second %s line for %s", n, f[1], name)
			}
			if f[1] == "HELP" {
				help[name] = true
			} else if len(f) >= 4 {
				kind[name] = f[3]
			}
			if current != "" && current != name {
				done[current] = true
			}
			current = name
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		family := familyOf(sampleName(line), kind)
		if !help[family] {
			return fmt.Errorf("line %d: sample of %s without a # HELP line before it", n, family)
		}
		if _, ok := kind[family]; !ok {
			return fmt.Errorf("line %d: sample of %s without a # TYPE line before it", n, family)
		}
		if family != current {
			return fmt.Errorf("line %d: sample of %s is not grouped with its family (after %s)", n, family, current)
		}
	}
	return sc.Err()
}

func sampleName(line string) string {
	if i := strings.IndexAny(line, "{ \t"); i >= 0 {
		return line[:i]
	}
	return line
}

// familyOf maps a summary's or histogram's sample name (_sum, _count, _bucket) to its family.
func familyOf(name string, kind map[string]string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if k := kind[base]; ok && (k == "histogram" || k == "summary") {
			return base
		}
	}
	return name
}

package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// A metric family weir exports, as docs/METRICS.md lists it.
type family struct {
	name string
	kind string // counter, gauge or histogram
	line int    // where docs/METRICS.md lists it
}

// families are the metric families weir exports, by name.
type families map[string]family

var familyName = regexp.MustCompile("^`(weir_[a-z0-9_]+)`$")

// readFamilies reads every family from the tables of docs/METRICS.md: a table whose header
// row names the columns "Family" and "Type", one family a row, its name in backquotes.
// Listing the families there, for operators, is what makes a name usable in the rules and
// the dashboard, so the two cannot name a family the reference does not document.
func readFamilies(path string) (families, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := families{}
	typeCol := -1 // the Type column of the table being read; -1 outside such a table
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			typeCol = -1
			continue
		}
		cells := tableCells(line)
		if typeCol < 0 {
			if len(cells) > 1 && cells[0] == "Family" {
				for i, c := range cells {
					if c == "Type" {
						typeCol = i
					}
				}
				if typeCol < 0 {
					return nil, fmt.Errorf("%s:%d: a Family table without a Type column", path, n)
				}
			}
			continue
		}
		if strings.Trim(cells[0], "-: ") == "" { // the |---|---| row
			continue
		}
		m := familyName.FindStringSubmatch(cells[0])
		if m == nil {
			return nil, fmt.Errorf("%s:%d: %q is not a weir family name in backquotes", path, n, cells[0])
		}
		if typeCol >= len(cells) {
			return nil, fmt.Errorf("%s:%d: %s has no Type cell", path, n, m[1])
		}
		kind := cells[typeCol]
		switch kind {
		case "counter":
			if !strings.HasSuffix(m[1], "_total") {
				return nil, fmt.Errorf("%s:%d: counter %s does not end in _total", path, n, m[1])
			}
		case "gauge", "histogram":
		default:
			return nil, fmt.Errorf("%s:%d: %s: unknown type %q", path, n, m[1], kind)
		}
		if prev, dup := out[m[1]]; dup {
			return nil, fmt.Errorf("%s:%d: %s listed twice (first at line %d)", path, n, m[1], prev.line)
		}
		out[m[1]] = family{name: m[1], kind: kind, line: n}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no metric family tables found", path)
	}
	return out, nil
}

func tableCells(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	cells := strings.Split(line, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// A series name as a query selects it: a family, or one of a histogram's _bucket, _sum and
// _count series.
type series struct {
	family
	part string // "bucket", "sum", "count" for a histogram's series, else ""
}

// lookup finds the family a series name belongs to.
func (fs families) lookup(name string) (series, error) {
	if f, ok := fs[name]; ok {
		if f.kind == "histogram" {
			return series{}, fmt.Errorf("%s is a histogram: select %s_bucket, _sum or _count", name, name)
		}
		return series{family: f}, nil
	}
	for _, part := range []string{"bucket", "sum", "count"} {
		base, ok := strings.CutSuffix(name, "_"+part)
		if !ok {
			continue
		}
		if f, ok := fs[base]; ok && f.kind == "histogram" {
			return series{family: f, part: part}, nil
		}
	}
	return series{}, fmt.Errorf("%s is not a family weir exports (docs/METRICS.md lists them)", name)
}

// counting tells whether the series only grows (a counter, or a histogram's series), so
// that it is read through rate() or increase(), never as it is.
func (s series) counting() bool {
	return s.kind == "counter" || s.kind == "histogram"
}

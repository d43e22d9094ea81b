// Command weir-contrib-check checks weir's Prometheus alerting rules and Grafana dashboard
// (contrib/): the rules load as Prometheus loads them, every PromQL expression parses with
// Prometheus's own parser, and every series they select is a family weir exports, as the
// tables of docs/METRICS.md list them.
//
//	weir-contrib-check -metrics docs/METRICS.md contrib/prometheus/weir-alerts.yml contrib/grafana/weir-dashboard.json
//
// A .yml or .yaml file is a rules file, a .json file a dashboard. Exits 1 with one line per
// problem found.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	metrics := flag.String("metrics", "docs/METRICS.md", "the metrics reference whose tables list the families weir exports")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [-metrics docs/METRICS.md] RULES.yml|DASHBOARD.json...\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	fs, err := readFamilies(*metrics)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	failed := false
	for _, path := range flag.Args() {
		errs := checkFile(path, fs)
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, e)
		}
		if len(errs) > 0 {
			failed = true
		} else {
			fmt.Printf("%s: ok\n", path)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// checkFile checks a rules file or a dashboard, told apart by the file's extension.
func checkFile(path string, fs families) []error {
	switch {
	case strings.HasSuffix(path, ".yml"), strings.HasSuffix(path, ".yaml"):
		return checkRules(path, fs)
	case strings.HasSuffix(path, ".json"):
		return checkDashboard(path, fs)
	}
	return []error{fmt.Errorf("%s: neither a rules file (.yml, .yaml) nor a dashboard (.json)", path)}
}

package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
)

// The severities the rules use, and what each asks of an operator.
var severities = map[string]bool{"critical": true, "warning": true, "info": true}

// parseRules reads a Prometheus rules file as Prometheus loads it (`promtool check rules`):
// unknown fields refused, every expression parsed, every label and annotation template
// parsed.
func parseRules(path string) (*rulefmt.RuleGroups, []error) {
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	return rulefmt.ParseFile(path, false, model.UTF8Validation, promqlParser, quiet)
}

// checkRules checks a rules file: it loads as Prometheus loads it, every rule is an alert
// with a unique name, a severity, a summary and a description, and every series it selects
// is one weir exports, read as its type allows (checkExpr).
func checkRules(path string, fs families) []error {
	groups, errs := parseRules(path)
	if len(errs) > 0 {
		return errs
	}
	if len(groups.Groups) == 0 {
		return []error{fmt.Errorf("%s: no rule groups", path)}
	}
	seen := map[string]string{}
	for _, g := range groups.Groups {
		if len(g.Rules) == 0 {
			errs = append(errs, fmt.Errorf("%s: group %q has no rules", path, g.Name))
		}
		for _, r := range g.Rules {
			where := fmt.Sprintf("%s: group %q, alert %q", path, g.Name, r.Alert)
			if r.Alert == "" {
				errs = append(errs, fmt.Errorf("%s: group %q, record %q: only alerting rules belong here", path, g.Name, r.Record))
				continue
			}
			if other, dup := seen[r.Alert]; dup {
				errs = append(errs, fmt.Errorf("%s: the name is used again (group %q)", where, other))
			}
			seen[r.Alert] = g.Name
			if !severities[r.Labels["severity"]] {
				errs = append(errs, fmt.Errorf("%s: label severity must be critical, warning or info, not %q", where, r.Labels["severity"]))
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					errs = append(errs, fmt.Errorf("%s: no %s annotation", where, a))
				}
			}
			if err := checkExpr(r.Expr, fs); err != nil {
				errs = append(errs, fmt.Errorf("%s: expr: %w", where, err))
			}
		}
	}
	return errs
}

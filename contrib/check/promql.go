package main

import (
	"errors"
	"fmt"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// promqlParser is Prometheus's own parser with its default options, as a Prometheus server
// without feature flags parses rules and queries.
var promqlParser = parser.NewParser(parser.Options{})

// Functions that read a counter's range: what a counter must go through.
var counterRangeFuncs = map[string]bool{
	"rate": true, "irate": true, "increase": true, "resets": true,
}

// checkExpr parses a PromQL expression and checks every series it selects: a family weir
// exports (docs/METRICS.md), a counter (or a histogram's series) only through rate(),
// irate(), increase() or resets(), a gauge never through them.
func checkExpr(expr string, fs families) error {
	ast, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return fmt.Errorf("does not parse as PromQL: %w", err)
	}
	var errs []error
	parser.Inspect(ast, func(node parser.Node, path []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name, err := selectorName(vs)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		s, err := fs.lookup(name)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		fn := rangeFunction(path)
		switch {
		case s.counting() && !counterRangeFuncs[fn]:
			errs = append(errs, fmt.Errorf("%s only grows: read it through rate() or increase(), not as it is", name))
		case !s.counting() && counterRangeFuncs[fn]:
			errs = append(errs, fmt.Errorf("%s is a gauge: %s() is for counters", name, fn))
		}
		return nil
	})
	return errors.Join(errs...)
}

// checkSelector checks a series selector (label_values' first argument): it parses, and the
// family it names is one weir exports, whatever its type.
func checkSelector(expr string, fs families) error {
	ast, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return fmt.Errorf("does not parse as PromQL: %w", err)
	}
	vs, ok := ast.(*parser.VectorSelector)
	if !ok {
		return fmt.Errorf("%s is not a series selector", expr)
	}
	name, err := selectorName(vs)
	if err == nil {
		_, err = fs.lookup(name)
	}
	return err
}

// selectorName is the metric name a selector selects, written as `name{…}` or
// `{__name__="name"}`; a selector by a name pattern cannot be checked and is refused.
func selectorName(vs *parser.VectorSelector) (string, error) {
	if vs.Name != "" {
		return vs.Name, nil
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName {
			if m.Type == labels.MatchEqual {
				return m.Value, nil
			}
			return "", fmt.Errorf("%s: select a family by its name, not by a pattern", vs)
		}
	}
	return "", fmt.Errorf("%s: selects no metric name", vs)
}

// rangeFunction names the function whose range argument holds the selector at the end of
// path (`rate(x[5m])`: rate), or "" when the selector is read as it is.
func rangeFunction(path []parser.Node) string {
	if len(path) < 2 {
		return ""
	}
	switch path[len(path)-1].(type) {
	case *parser.MatrixSelector, *parser.SubqueryExpr:
	default:
		return ""
	}
	if call, ok := path[len(path)-2].(*parser.Call); ok {
		return call.Func.Name
	}
	return ""
}

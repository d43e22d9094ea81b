package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// The datasource a dashboard made for import names: Grafana asks for it on import
// (`__inputs`) and puts its uid wherever `${DS_PROMETHEUS}` stands.
const datasourceInput = "DS_PROMETHEUS"

// Oldest dashboard JSON schema accepted (Grafana 10.x writes 38 and 39).
const minSchemaVersion = 36

type dashboard struct {
	Title         string     `json:"title"`
	UID           string     `json:"uid"`
	SchemaVersion int        `json:"schemaVersion"`
	Inputs        []input    `json:"__inputs"`
	Templating    templating `json:"templating"`
	Panels        []panel    `json:"panels"`
}

type input struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	PluginID string `json:"pluginId"`
}

type templating struct {
	List []variable `json:"list"`
}

type variable struct {
	Name       string      `json:"name"`
	Type       string      `json:"type"`
	Datasource *datasource `json:"datasource"`
	Query      any         `json:"query"` // a string, or {"query": "…"} since Grafana 9
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type gridPos struct {
	H *int `json:"h"`
	W *int `json:"w"`
	X *int `json:"x"`
	Y *int `json:"y"`
}

type panel struct {
	ID         *int        `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	GridPos    *gridPos    `json:"gridPos"`
	Datasource *datasource `json:"datasource"`
	Targets    []target    `json:"targets"`
	Panels     []panel     `json:"panels"` // a collapsed row's panels
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
}

// readDashboard reads a dashboard's JSON (one object, nothing after it).
func readDashboard(path string) (*dashboard, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%s: not valid dashboard JSON: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: text after the dashboard's JSON object", path)
	}
	return &d, nil
}

// checkDashboard checks a Grafana dashboard made for import: valid JSON of a recent schema,
// the Prometheus datasource as an input, unique panel ids, every panel placed on the 24-column
// grid without overlapping another, and every query (panels' and variables') parsing as
// PromQL over families weir exports once Grafana's variables are put in.
func checkDashboard(path string, fs families) []error {
	d, err := readDashboard(path)
	if err != nil {
		return []error{err}
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{path}, args...)...))
	}
	if d.Title == "" || d.UID == "" {
		fail("the dashboard needs a title and a uid")
	}
	if d.SchemaVersion < minSchemaVersion {
		fail("schemaVersion %d is older than %d", d.SchemaVersion, minSchemaVersion)
	}
	hasInput := false
	for _, in := range d.Inputs {
		hasInput = hasInput || (in.Name == datasourceInput && in.Type == "datasource" && in.PluginID == "prometheus")
	}
	if !hasInput {
		fail("__inputs has no Prometheus datasource named %s", datasourceInput)
	}

	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		if v.Name == "" {
			fail("a templating variable without a name")
			continue
		}
		if _, dup := vars[v.Name]; dup {
			fail("templating variable %q defined twice", v.Name)
		}
		vars[v.Name] = v
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if err := checkDatasource(v.Datasource, false); err != nil {
			fail("variable %q: %v", v.Name, err)
		}
		if err := checkVariableQuery(v, vars, fs); err != nil {
			fail("variable %q: %v", v.Name, err)
		}
	}

	ids := map[int]string{}
	var placed []panel
	var walk func(ps []panel, top bool)
	walk = func(ps []panel, top bool) {
		for _, p := range ps {
			name := fmt.Sprintf("panel %q", p.Title)
			if p.ID == nil {
				fail("%s has no id", name)
			} else if other, dup := ids[*p.ID]; dup {
				fail("%s has id %d, as panel %q", name, *p.ID, other)
			} else {
				ids[*p.ID] = p.Title
			}
			if p.Title == "" || p.Type == "" {
				fail("panel %v needs a title and a type", p.ID)
			}
			if err := checkGridPos(p.GridPos); err != nil {
				fail("%s: %v", name, err)
			} else if top {
				for _, q := range placed {
					if overlaps(p.GridPos, q.GridPos) {
						fail("%s overlaps panel %q", name, q.Title)
					}
				}
				placed = append(placed, p)
			}
			if p.Type == "row" {
				walk(p.Panels, false)
				continue
			}
			if err := checkDatasource(p.Datasource, false); err != nil {
				fail("%s: %v", name, err)
			}
			if len(p.Targets) == 0 {
				fail("%s has no queries", name)
			}
			refs := map[string]bool{}
			for _, t := range p.Targets {
				if t.RefID == "" || refs[t.RefID] {
					fail("%s: each query needs its own refId (%q)", name, t.RefID)
				}
				refs[t.RefID] = true
				if err := checkDatasource(t.Datasource, true); err != nil {
					fail("%s, query %s: %v", name, t.RefID, err)
				}
				expr, err := expandVariables(t.Expr, vars)
				if err == nil {
					err = checkExpr(expr, fs)
				}
				if err != nil {
					fail("%s, query %s: %v", name, t.RefID, err)
				}
			}
		}
	}
	walk(d.Panels, true)
	if len(ids) == 0 {
		fail("no panels")
	}
	return errs
}

// checkDatasource: every query goes to the datasource chosen on import (absent on a target:
// the panel's).
func checkDatasource(ds *datasource, optional bool) error {
	if ds == nil {
		if optional {
			return nil
		}
		return errors.New("no datasource")
	}
	if ds.Type != "prometheus" || ds.UID != "${"+datasourceInput+"}" {
		return fmt.Errorf("datasource %s/%s, not prometheus/${%s}", ds.Type, ds.UID, datasourceInput)
	}
	return nil
}

func checkGridPos(g *gridPos) error {
	if g == nil || g.H == nil || g.W == nil || g.X == nil || g.Y == nil {
		return errors.New("gridPos needs h, w, x and y")
	}
	if *g.H < 1 || *g.W < 1 || *g.X < 0 || *g.Y < 0 || *g.X+*g.W > 24 {
		return fmt.Errorf("gridPos h=%d w=%d x=%d y=%d is off the 24-column grid", *g.H, *g.W, *g.X, *g.Y)
	}
	return nil
}

func overlaps(a, b *gridPos) bool {
	return *a.X < *b.X+*b.W && *b.X < *a.X+*a.W && *a.Y < *b.Y+*b.H && *b.Y < *a.Y+*a.H
}

var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// checkVariableQuery: a Prometheus query variable is `label_values(SELECTOR, LABEL)` (or a
// PromQL query); its selector must select a family weir exports.
func checkVariableQuery(v variable, vars map[string]variable, fs families) error {
	q, ok := v.Query.(string)
	if m, isObject := v.Query.(map[string]any); isObject {
		q, ok = m["query"].(string)
	}
	if !ok || strings.TrimSpace(q) == "" {
		return errors.New("a query variable without a query")
	}
	check := checkExpr
	if m := labelValues.FindStringSubmatch(q); m != nil {
		q, check = m[1], checkSelector
	} else if strings.HasPrefix(strings.TrimSpace(q), "label_values(") {
		return fmt.Errorf("%q: write label_values(SELECTOR, LABEL)", q)
	}
	expr, err := expandVariables(q, vars)
	if err == nil {
		err = check(expr, fs)
	}
	return err
}

// A Grafana variable in a query: $name, ${name}, ${name:format} or [[name]].
var variableRef = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[A-Za-z0-9_]+)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]`)

// What Grafana's own variables stand for when a query is parsed: any valid value will do.
var builtinVariables = map[string]string{
	"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
	"__interval_ms": "60000", "__range_ms": "3600000", "__range_s": "3600",
}

// A dashboard variable is used in a regular-expression matcher (`label=~"$var"`), the only
// place where Grafana's values for several choices or "All" (a|b, .*) select what they mean.
var regexMatcherBefore = regexp.MustCompile(`[=!]~\s*"$`)

// expandVariables puts values into a query's Grafana variables as Grafana does before it
// sends the query: its own ($__rate_interval) by a typical value, the dashboard's by `.+`,
// which matches every value. A variable the dashboard does not define is an error.
func expandVariables(expr string, vars map[string]variable) (string, error) {
	var errs []error
	out := variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		if v, ok := builtinVariables[name]; ok {
			return v
		}
		if _, ok := vars[name]; !ok {
			errs = append(errs, fmt.Errorf("%s: no such variable in the dashboard", ref))
			return ref
		}
		return "\x00" + ref // marked: its context is checked below
	})
	for {
		i := strings.IndexByte(out, 0)
		if i < 0 {
			break
		}
		ref := variableRef.FindString(out[i+1:])
		if !regexMatcherBefore.MatchString(out[:i]) {
			errs = append(errs, fmt.Errorf("%s: use a dashboard variable in a matcher such as label=~\"%s\"", ref, ref))
		}
		out = out[:i] + ".+" + out[i+1+len(ref):]
	}
	return out, errors.Join(errs...)
}

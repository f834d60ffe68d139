package chart

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	promql "github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestDashboard: the chart's Grafana dashboard is a ConfigMap the Grafana
// sidecar loads, only when asked for; its JSON parses, it has the panels
// an operator needs, and every query parses and names only metrics that
// sandlot's code registers.
func TestDashboard(t *testing.T) {
	if _, ok := render(t, nil)[key("ConfigMap", "sandlot-dashboard")]; ok {
		t.Error("dashboard rendered by default")
	}
	var cm corev1.ConfigMap
	render(t, map[string]any{"metrics": map[string]any{"dashboard": map[string]any{"enabled": true}}}).
		into(t, "ConfigMap", "sandlot-dashboard", &cm)
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard labels %v, want grafana_dashboard: \"1\"", cm.Labels)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data["sandlot.json"]), &dash); err != nil {
		t.Fatalf("the dashboard's JSON: %v", err)
	}
	registered := registeredMetrics(t)
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			// Grafana's rate interval, a range PromQL does not know.
			checkExpr(t, "panel "+p.Title, strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m"), registered)
		}
	}
	for _, want := range []string{"Sandboxes by phase", "Create latency by source (p50, p95)", "Snapshot throughput",
		"Upload throughput", "Remote lag (p50, p95)", "Pool fill", "Node capacity requested"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q in %q", want, titles)
		}
	}
}

// TestAlerts: the chart's PrometheusRule, only when asked for, is a rule
// group Prometheus loads (rulefmt: expressions and templates parse) with
// the alerts an operator needs, each naming only registered metrics.
func TestAlerts(t *testing.T) {
	if _, ok := render(t, nil)[key("PrometheusRule", "sandlot")]; ok {
		t.Error("PrometheusRule rendered by default")
	}
	rule := render(t, map[string]any{"metrics": map[string]any{"alerts": map[string]any{"enabled": true}}}).get(t, "PrometheusRule", "sandlot")
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	raw, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	parsed, errs := rulefmt.Parse(raw, false, model.LegacyValidation, promQL, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("the rule group does not parse: %v\n%s", errs, raw)
	}
	registered := registeredMetrics(t)
	var alerts []string
	for _, g := range parsed.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkExpr(t, "alert "+r.Alert, r.Expr, registered)
		}
	}
	for _, want := range []string{"SandlotUploadsFailing", "SandlotRemoteLag", "SandlotPoolEmpty", "SandlotBuildsFailing",
		"SandlotNodesFingerprintMismatched"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %v", want, alerts)
		}
	}
}

// promQL parses as Prometheus does by default (no experimental features).
var promQL = promql.NewParser(promql.Options{})

// checkExpr: expr parses as PromQL and every metric it selects is
// registered.
func checkExpr(t *testing.T, where, expr string, registered map[string]bool) {
	t.Helper()
	e, err := promQL.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return
	}
	selects := 0
	promql.Inspect(e, func(n promql.Node, _ []promql.Node) error {
		if vs, ok := n.(*promql.VectorSelector); ok {
			selects++
			if !registered[vs.Name] {
				t.Errorf("%s: %q selects %q, which no metric of sandlot's code is", where, expr, vs.Name)
			}
		}
		return nil
	})
	if selects == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
}

// registeredMetrics are the names of the series sandlot's code exports,
// read from its metric definitions: the Name of every prometheus
// Counter/Gauge/Histogram/SummaryOpts literal and the name of every
// prometheus.NewDesc, in the non-test Go files outside test/ (a
// histogram's as its _bucket, _sum and _count).
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "test" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return metricsIn(t, path, out)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("only %d metric names found in the code: %v", len(out), out)
	}
	return out
}

// metricsIn adds the metric names that the Go file at path defines.
func metricsIn(t *testing.T, path string, out map[string]bool) error {
	src, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(src), "prometheus.") {
		return err
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		return err
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if isPrometheus(n.Fun, "NewDesc") && len(n.Args) > 0 {
				out[literal(t, path, n.Args[0])] = true
			}
		case *ast.CompositeLit:
			kind := ""
			for _, k := range []string{"CounterOpts", "GaugeOpts", "HistogramOpts", "SummaryOpts"} {
				if isPrometheus(n.Type, k) {
					kind = k
				}
			}
			for _, el := range n.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok && kind != "" && identIs(kv.Key, "Name") {
					addOpts(out, kind, literal(t, path, kv.Value))
				}
			}
		}
		return true
	})
	return nil
}

func addOpts(out map[string]bool, kind, name string) {
	out[name] = true
	switch kind {
	case "HistogramOpts":
		out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
	case "SummaryOpts":
		out[name+"_sum"], out[name+"_count"] = true, true
	}
}

func isPrometheus(e ast.Expr, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	return ok && identIs(sel.X, "prometheus") && sel.Sel.Name == name
}

func identIs(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// literal is the string literal e; a name the test cannot read fails it
// (a metric named by an expression would escape the check).
func literal(t *testing.T, path string, e ast.Expr) string {
	if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
		if s, err := strconv.Unquote(lit.Value); err == nil {
			return s
		}
	}
	t.Errorf("%s: a metric named by an expression, not a string literal", path)
	return ""
}

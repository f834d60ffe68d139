// Package dashboard renders the chart's Grafana dashboard to a PNG from a
// real run: a Prometheus server (built from Go modules, hack/
// prometheus-bins.sh) scrapes the installed components as the chart's
// ServiceMonitor would, a workload drives the cluster, and each panel's
// own PromQL is evaluated by that server over the run and drawn where the
// dashboard places it. There is no Grafana here (neither a download site
// nor a package), so the drawing is gonum/plot's, not Grafana's; the
// queries and the layout are the dashboard's.
package dashboard

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Dashboard is what is drawn of a Grafana dashboard.
type Dashboard struct {
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is a row (a heading) or a time series panel.
type Panel struct {
	Type    string   `json:"type"` // "row", "timeseries"
	Title   string   `json:"title"`
	GridPos GridPos  `json:"gridPos"`
	Targets []Target `json:"targets"`
	Field   struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// GridPos is a panel's place on Grafana's grid: 24 columns, rows of 30 px.
type GridPos struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

// Target is one query of a panel.
type Target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

// Load reads a dashboard's JSON.
func Load(path string) (Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Dashboard{}, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return Dashboard{}, fmt.Errorf("dashboard %s: %w", path, err)
	}
	return d, nil
}

// RateInterval is what Grafana's $__rate_interval becomes here: four
// scrape intervals, its own floor for it.
const RateInterval = "20s"

// Query is a target's expression as Prometheus takes it.
func (t Target) Query() string {
	return strings.ReplaceAll(t.Expr, "$__rate_interval", RateInterval)
}

var legendLabel = regexp.MustCompile(`{{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*}}`)

// Legend names a series as Grafana does: the legend format with each
// {{label}} replaced by the series' value, or else the labels themselves.
func (t Target) Legend(labels map[string]string) string {
	if t.LegendFormat != "" {
		return legendLabel.ReplaceAllStringFunc(t.LegendFormat, func(m string) string {
			return labels[legendLabel.FindStringSubmatch(m)[1]]
		})
	}
	if len(labels) == 0 {
		return t.Expr
	}
	parts := make([]string, 0, len(labels))
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, ", ") + "}"
}

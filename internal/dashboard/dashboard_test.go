package dashboard

import (
	"bytes"
	"image/png"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/sandlot-dev/sandlot/internal/cluster"
)

func chartDashboard(t *testing.T) Dashboard {
	t.Helper()
	d, err := Load(filepath.Join(cluster.RepoRoot(), "charts", "sandlot", "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLegendAndQuery(t *testing.T) {
	tg := Target{Expr: "sum(rate(x[$__rate_interval]))", LegendFormat: "{{source}} p95 {{ reason }}"}
	if got := tg.Legend(map[string]string{"source": "pool", "reason": "PodLost"}); got != "pool p95 PodLost" {
		t.Errorf("legend %q", got)
	}
	if got := tg.Query(); got != "sum(rate(x["+RateInterval+"]))" {
		t.Errorf("query %q", got)
	}
	if got := (Target{Expr: "up"}).Legend(map[string]string{"job": "api", "instance": "a"}); got != "{instance=a, job=api}" {
		t.Errorf("legend without a format %q", got)
	}
}

func TestDecodeMatrix(t *testing.T) {
	body := `{"status":"success","data":{"resultType":"matrix","result":[
		{"metric":{"phase":"Running"},"values":[[1700000000,"3"],[1700000005.5,"NaN"]]}]}}`
	s, err := decodeMatrix([]byte(body), "q")
	if err != nil || len(s) != 1 || s[0].Labels["phase"] != "Running" || len(s[0].Values) != 2 ||
		s[0].Values[0] != 3 || !math.IsNaN(s[0].Values[1]) || s[0].Times[1].UnixMilli() != 1700000005500 {
		t.Fatalf("decoded %+v, %v", s, err)
	}
	if _, err := decodeMatrix([]byte(`{"status":"error","error":"parse error"}`), "q("); err == nil ||
		!strings.Contains(err.Error(), "parse error") {
		t.Fatalf("an error answer: %v", err)
	}
}

func TestReadyTargets(t *testing.T) {
	sl := discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr.To("metrics"), Port: ptr.To(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.0.0.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{Addresses: []string{"10.0.0.1"}},
		}}
	if got := readyTargets([]discoveryv1.EndpointSlice{sl}); strings.Join(got, " ") != "10.0.0.1:8080 10.0.0.2:8080" {
		t.Fatalf("targets %v", got)
	}
}

// TestRenderPlacesEveryPanel: the chart's dashboard renders on the grid's
// width and height, with a panel of data, panels without, and NaN points.
func TestRenderPlacesEveryPanel(t *testing.T) {
	d := chartDashboard(t)
	start := time.Unix(1700000000, 0)
	s := Series{Labels: map[string]string{"phase": "Running"}}
	for i := range 50 {
		s.Times = append(s.Times, start.Add(time.Duration(i)*5*time.Second))
		s.Values = append(s.Values, float64(i%7))
	}
	s.Values[3] = math.NaN()
	data := Data{1: {{s}}}
	var buf bytes.Buffer
	if err := Render(&buf, d, data, Run{Title: "sandlot (test)", Start: start, End: start.Add(250 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	if b := img.Bounds(); b.Dx() != Width || b.Dy() != (rows+2)*RowHeight+pad {
		t.Fatalf("image %v, want %dx%d", b, Width, (rows+2)*RowHeight+pad)
	}
}

func TestConfigScrapesEachJob(t *testing.T) {
	cfg := config("/d", []Job{{Name: "api-metrics", Targets: []string{"10.0.0.1:9090"}}, {Name: "agent-metrics", Targets: []string{"a:1", "b:1"}}})
	for _, want := range []string{`job_name: "api-metrics"`, `targets: ["10.0.0.1:9090"]`, `targets: ["a:1", "b:1"]`,
		`credentials_file: "/d/token"`, "insecure_skip_verify: true", "scrape_interval: 5s"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %s:\n%s", want, cfg)
		}
	}
}

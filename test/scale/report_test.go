package scale

import (
	"math"
	"testing"
)

// TestPerCreateSplitsReadsAndRefused: the API server's request counter,
// as scraped, splits into writes and reads per create, and the writes the
// server refused are found by their response code.
func TestPerCreateSplitsReadsAndRefused(t *testing.T) {
	raw := []byte(`# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="sandboxes",subresource="status",verb="PATCH"} 20
apiserver_request_total{code="409",resource="sandboxes",subresource="status",verb="PATCH"} 6
apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 10
apiserver_request_total{code="404",resource="pods",subresource="",verb="GET"} 10
apiserver_request_total{code="200",resource="sandboxes",subresource="",verb="LIST"} 2
apiserver_request_total{code="503",resource="secrets",subresource="",verb="POST"} 1
`)
	c, err := parseMetrics(raw, map[string][]string{"apiserver_request_total": {"verb", "resource", "subresource", "code"}})
	if err != nil {
		t.Fatal(err)
	}
	writes, reads := perCreate(c, "apiserver_request_total{", 10)
	for _, tc := range []struct {
		what string
		got  float64
		want float64
	}{
		{"writes", sum(writes), 3.7},
		{"reads", sum(reads), 1.2},
		{"refused writes", sum(refused(writes)), 0.7},
	} {
		if math.Abs(tc.got-tc.want) > 1e-9 {
			t.Errorf("%s per create = %v, want %v (writes %v, reads %v)", tc.what, tc.got, tc.want, writes, reads)
		}
	}
}

// TestWatchEventsPerCreate reads one resource's watch events per create
// out of the scraped counter.
func TestWatchEventsPerCreate(t *testing.T) {
	raw := []byte(`# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="sandlot.dev",kind="Sandbox",resource="sandboxes",version="v1alpha1"} 180
apiserver_watch_events_total{group="",kind="Pod",resource="pods",version="v1"} 120
`)
	c, err := parseMetrics(raw, map[string][]string{"apiserver_watch_events_total": {"resource"}})
	if err != nil {
		t.Fatal(err)
	}
	p := PhaseReport{Creates: 10, Costs: Costs{API: c}}
	if got := p.WatchEventsPerCreate("sandboxes"); got != 18 {
		t.Errorf("sandboxes: %v per create, want 18", got)
	}
	if got := p.WatchEventsPerCreate("secrets"); got != 0 {
		t.Errorf("secrets: %v per create, want 0", got)
	}
}

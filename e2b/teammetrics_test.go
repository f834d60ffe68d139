package e2b

import (
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestTeamSeries: a sample counts each team's running sandboxes (not the
// paused or failed ones) and the starts since the previous sample, per
// second; samples older than the retention go.
func TestTeamSeries(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	started := func(ns string, at time.Time, paused bool, phase sandlotv1.SandboxPhase) sandlotv1.Sandbox {
		s := sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns}}
		s.Spec.Paused = paused
		s.Status.Phase = phase
		s.Status.StartedAt = &metav1.Time{Time: at}
		return s
	}
	ts := teamSeries{byNS: map[string][]teamSample{}}
	ts.sample(t0, []string{"a", "b"}, nil)
	list := []sandlotv1.Sandbox{
		started("a", t0.Add(2*time.Second), false, sandlotv1.SandboxRunning),
		started("a", t0.Add(3*time.Second), false, sandlotv1.SandboxRunning),
		started("a", t0.Add(-time.Hour), true, sandlotv1.SandboxPaused),
		started("b", t0.Add(-time.Hour), false, sandlotv1.SandboxFailed),
	}
	t1 := t0.Add(teamSampleEvery)
	ts.sample(t1, []string{"a", "b"}, list)
	a := ts.between("a", t1, t1)
	if len(a) != 1 || a[0].concurrent != 2 || a[0].startRate != float32(2/teamSampleEvery.Seconds()) {
		t.Errorf("team a: %+v, want 2 running, 2 starts in %v", a, teamSampleEvery)
	}
	if b := ts.between("b", t0, t1); len(b) != 2 || b[1].concurrent != 0 || b[1].startRate != 0 {
		t.Errorf("team b: %+v, want nothing running", b)
	}
	ts.sample(t1.Add(teamSampleKeep), []string{"a"}, nil)
	if all := ts.between("a", time.Time{}, t1.Add(teamSampleKeep)); len(all) != 2 || !all[0].at.Equal(t1) {
		t.Errorf("after a day: %+v, want the samples of the last day only", all)
	}
}

// TestTeamMetricsRoutes: only the key's own team; the metric named; a
// sample the sampler took comes back in both routes.
func TestTeamMetricsRoutes(t *testing.T) {
	f := setup(t)
	now := time.Now()
	f.srv.teamSeries.sample(now, []string{testNS}, nil)
	for path, code := range map[string]int{
		"/teams/someone-else/metrics":                             http.StatusForbidden,
		"/teams/" + testNS + "/metrics/max":                       http.StatusBadRequest,
		"/teams/" + testNS + "/metrics/max?metric=cpu":            http.StatusBadRequest,
		"/teams/" + testNS + "/metrics?start=yesterday":           http.StatusBadRequest,
		"/teams/" + testNS + "/metrics?start=2000000000&end=1000": http.StatusBadRequest,
	} {
		if r := f.api(t, "GET", path, nil); r.code != code {
			t.Errorf("GET %s: %d %s, want %d", path, r.code, r.body, code)
		}
	}
	got := decode[[]teamMetricJSON](t, f.api(t, "GET", "/teams/"+testNS+"/metrics", nil), http.StatusOK)
	if len(got) == 0 || got[len(got)-1].TimestampUnix != now.Unix() {
		t.Errorf("metrics %+v, want the sample at %d last", got, now.Unix())
	}
	m := decode[maxTeamMetricJSON](t, f.api(t, "GET", "/teams/"+testNS+"/metrics/max?metric=concurrent_sandboxes", nil), http.StatusOK)
	if m.TimestampUnix == 0 || m.Value < 0 {
		t.Errorf("max %+v", m)
	}
}

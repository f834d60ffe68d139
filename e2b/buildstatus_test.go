package e2b

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestBuildStateOfARetriedBuild: a failure the controller builds again
// (retryAt set) is still "building" to the SDK, with a log line saying
// why and when; one it does not retry is the "error" it always was.
func TestBuildStateOfARetriedBuild(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC))
	tpl := func(b sandlotv1.BaseSnapshot) *sandlotv1.Template {
		t := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "t", Generation: 2}}
		t.Status.ObservedGeneration, t.Status.BaseRevision = 2, "r1"
		t.Status.Conditions = []metav1.Condition{{Type: sandlotv1.ConditionBaseSnapshotReady, Status: metav1.ConditionFalse,
			Reason: b.Reason, ObservedGeneration: 2}}
		b.Revision, b.Node, b.Snapshot = "r1", "n1", "t-r1-n1"
		t.Status.BaseSnapshots = []sandlotv1.BaseSnapshot{b}
		return t
	}
	cases := []struct {
		name      string
		base      sandlotv1.BaseSnapshot
		state     string
		retryLine string
	}{
		{"retried", sandlotv1.BaseSnapshot{Phase: sandlotv1.BaseFailed, Reason: sandlotv1.ReasonImageMissing,
			Message: "image x not on the node", Attempts: 2, RetryAt: &at}, "building",
			"attempt 2 failed (ImageMissing: image x not on the node); building again at 2026-12-06T18:00:00Z"},
		{"final", sandlotv1.BaseSnapshot{Phase: sandlotv1.BaseFailed, Reason: sandlotv1.ReasonBuildFailed,
			Message: "step 1 exited 1", Attempts: 1}, "error", ""},
		{"building", sandlotv1.BaseSnapshot{Phase: sandlotv1.BaseBuilding, Attempts: 3}, "building", ""},
	}
	for _, c := range cases {
		state, followed := buildState(tpl(c.base))
		if state != c.state {
			t.Errorf("%s: state %q, want %q", c.name, state, c.state)
		}
		logged := []buildLine{{Time: at.Add(-time.Minute), Level: "error", Msg: "pull failed"}}
		l, ok := retryLine(followed, logged)
		if ok != (c.retryLine != "") || !strings.Contains(l.Msg, c.retryLine) || (ok && (l.Level != "warn" || !l.Time.Equal(logged[0].Time))) {
			t.Errorf("%s: retry line %+v (%v), want %q at the last line's time", c.name, l, ok, c.retryLine)
		}
	}
}

package metrics

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestStartObserved(t *testing.T) {
	created := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	resumed := created.Add(time.Minute)
	now := resumed.Add(700 * time.Millisecond)
	sbx := func(phase sandlotv1.SandboxPhase, mutate ...func(*sandlotv1.Sandbox)) *sandlotv1.Sandbox {
		s := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created), Annotations: map[string]string{}},
			Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "python"}}}
		s.Status.Phase = phase
		for _, m := range mutate {
			m(s)
		}
		return s
	}
	claimed := func(s *sandlotv1.Sandbox) {
		s.Status.Conditions = []metav1.Condition{{Type: sandlotv1.ConditionScheduled, Status: metav1.ConditionTrue,
			Reason: sandlotv1.ReasonClaimedFromPool}}
	}
	slotted := func(s *sandlotv1.Sandbox) {
		s.Status.Conditions = []metav1.Condition{{Type: sandlotv1.ConditionScheduled, Status: metav1.ConditionTrue,
			Reason: sandlotv1.ReasonClaimedStartSlot}}
	}
	clone := func(s *sandlotv1.Sandbox) { s.Spec.Source = sandlotv1.SandboxSource{Snapshot: "snap"} }
	builder := func(s *sandlotv1.Sandbox) { s.Annotations[sandlotv1.AnnotationBaseOf] = "python" }
	resumedAt := func(s *sandlotv1.Sandbox) { s.Status.LastResumedAt = &metav1.Time{Time: resumed} }
	ranBefore := func(s *sandlotv1.Sandbox) { s.Status.StartedAt = &metav1.Time{Time: created.Add(time.Second)} }
	ranAfter := func(s *sandlotv1.Sandbox) { s.Status.StartedAt = &metav1.Time{Time: resumed.Add(time.Second)} }
	for _, tc := range []struct {
		name     string
		old, cur *sandlotv1.Sandbox
		ok       bool
		resume   bool
		source   string
		took     time.Duration
	}{
		{"template restore", sbx(sandlotv1.SandboxStarting), sbx(sandlotv1.SandboxRunning), true, false, StartTemplate, now.Sub(created)},
		{"warm pool claim", sbx(sandlotv1.SandboxStarting), sbx(sandlotv1.SandboxRunning, claimed), true, false, StartPool, now.Sub(created)},
		{"start slot claim of a clone", sbx(sandlotv1.SandboxStarting), sbx(sandlotv1.SandboxRunning, clone, slotted), true, false, StartSlot, now.Sub(created)},
		{"clone of a snapshot", sbx(sandlotv1.SandboxPending), sbx(sandlotv1.SandboxRunning, clone), true, false, StartSnapshot, now.Sub(created)},
		{"base builder", sbx(sandlotv1.SandboxStarting), sbx(sandlotv1.SandboxRunning, builder), true, false, StartCold, now.Sub(created)},
		{"resume", sbx(sandlotv1.SandboxResuming, resumedAt, ranBefore), sbx(sandlotv1.SandboxRunning, resumedAt, ranAfter), true, true, "", 700 * time.Millisecond},
		{"resume placed on another node", sbx(sandlotv1.SandboxStarting, resumedAt, ranBefore), sbx(sandlotv1.SandboxRunning, resumedAt, ranAfter), true, true, "", 700 * time.Millisecond},
		{"a flap after the resume: no count", sbx(sandlotv1.SandboxStarting, resumedAt, ranAfter), sbx(sandlotv1.SandboxRunning, resumedAt, ranAfter), false, false, "", 0},
		{"a flap of a sandbox never resumed: no count", sbx(sandlotv1.SandboxStarting, ranBefore), sbx(sandlotv1.SandboxRunning, ranBefore), false, false, "", 0},
		{"still running: no second count", sbx(sandlotv1.SandboxRunning), sbx(sandlotv1.SandboxRunning), false, false, "", 0},
		{"not running yet", sbx(sandlotv1.SandboxPending), sbx(sandlotv1.SandboxStarting), false, false, "", 0},
		{"failed", sbx(sandlotv1.SandboxStarting), sbx(sandlotv1.SandboxFailed), false, false, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resume, source, took, ok := startObserved(tc.old, tc.cur, now)
			if ok != tc.ok || resume != tc.resume || source != tc.source || took != tc.took {
				t.Fatalf("got (resume %t, %q, %v, ok %t), want (resume %t, %q, %v, ok %t)",
					resume, source, took, ok, tc.resume, tc.source, tc.took, tc.ok)
			}
		})
	}
}

func TestCountPhases(t *testing.T) {
	items := []sandlotv1.Sandbox{{Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxRunning}},
		{Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxRunning}}, {Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxPaused}}, {}}
	got := countPhases(items)
	if got[sandlotv1.SandboxRunning] != 2 || got[sandlotv1.SandboxPaused] != 1 || got[sandlotv1.SandboxFailed] != 0 || len(got) != 8 {
		t.Fatalf("countPhases = %v", got)
	}
}

// TestStartCountedOnce: the same start seen again (a reconcile of a
// cached copy that lags the controller's own write) is not counted twice;
// a later resume is.
func TestStartCountedOnce(t *testing.T) {
	seen := &startsSeen{last: map[types.UID]string{}}
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{UID: "u1"}}
	if !seen.first(sbx, false) || seen.first(sbx, false) {
		t.Fatal("a create counted other than once")
	}
	sbx.Status.LastResumedAt = &metav1.Time{Time: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	if !seen.first(sbx, true) || seen.first(sbx, true) {
		t.Fatal("a resume counted other than once")
	}
	sbx.Status.LastResumedAt = &metav1.Time{Time: sbx.Status.LastResumedAt.Add(time.Minute)}
	if !seen.first(sbx, true) {
		t.Fatal("the next resume not counted")
	}
	seen.forget(sbx.UID)
	if len(seen.last) != 0 {
		t.Fatal("a gone sandbox still remembered")
	}
}

package sandbox

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestTemplateChangedForSandboxes: a template's sandboxes are woken by
// what they act on, not by the rest of its status.
func TestTemplateChangedForSandboxes(t *testing.T) {
	base := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: sandlotv1.TemplateStatus{
		Conditions:    []metav1.Condition{{Type: sandlotv1.ConditionAccepted, Status: metav1.ConditionTrue, ObservedGeneration: 2}},
		BaseSnapshots: []sandlotv1.BaseSnapshot{{Node: "a", Revision: "r", Snapshot: "s", Phase: sandlotv1.BaseReady}},
		Pool:          []sandlotv1.NodePool{{Node: "a", Ready: 1}}}}
	cases := map[string]struct {
		edit func(*sandlotv1.Template)
		wake bool
	}{
		"a pool count":                 {func(t *sandlotv1.Template) { t.Status.Pool[0].Ready = 2 }, false},
		"a base's message":             {func(t *sandlotv1.Template) { t.Status.BaseSnapshots[0].Message = "m" }, false},
		"the spec":                     {func(t *sandlotv1.Template) { t.Generation = 3 }, true},
		"accepted at a new generation": {func(t *sandlotv1.Template) { t.Status.Conditions[0].ObservedGeneration = 3 }, true},
		"the bases' build failed": {func(t *sandlotv1.Template) {
			t.Status.Conditions = append(t.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionBaseSnapshotReady,
				Status: metav1.ConditionFalse, Reason: sandlotv1.ReasonBuildFailed})
		}, true},
		"no longer accepted": {func(t *sandlotv1.Template) { t.Status.Conditions[0].Status = metav1.ConditionFalse }, true},
		"a base Ready on another node": {func(t *sandlotv1.Template) {
			t.Status.BaseSnapshots = append(t.Status.BaseSnapshots, sandlotv1.BaseSnapshot{Node: "b", Phase: sandlotv1.BaseReady})
		}, true},
	}
	p := templateChangedForSandboxes()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := base.DeepCopy()
			tc.edit(n)
			if got := p.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != tc.wake {
				t.Fatalf("wakes the sandboxes = %v, want %v", got, tc.wake)
			}
		})
	}
}

package writes

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestRecordTransitions: a start's normal progress writes no Event (it is
// in the conditions); failures, pauses, resumes and other kinds do.
func TestRecordTransitions(t *testing.T) {
	sbx := func(phase sandlotv1.SandboxPhase, ready metav1.ConditionStatus, reason string) *sandlotv1.Sandbox {
		s := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}}
		s.Status.Phase = phase
		if reason != "" {
			s.Status.Conditions = []metav1.Condition{{Type: sandlotv1.ConditionReady, Status: ready, Reason: reason}}
		}
		return s
	}
	snap := func(ready metav1.ConditionStatus) *sandlotv1.Snapshot {
		s := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
		s.Status.Conditions = []metav1.Condition{{Type: sandlotv1.ConditionReady, Status: ready, Reason: "Persisted"}}
		return s
	}
	cases := []struct {
		name      string
		orig, obj runtime.Object
		want      string // the Event's type, "" for none
	}{
		{"created to Starting", sbx("", "", ""), sbx(sandlotv1.SandboxStarting, metav1.ConditionFalse, "Starting"), ""},
		{"Starting to Running", sbx(sandlotv1.SandboxStarting, metav1.ConditionFalse, "Starting"),
			sbx(sandlotv1.SandboxRunning, metav1.ConditionTrue, "Running"), ""},
		{"a start that failed", sbx(sandlotv1.SandboxPending, metav1.ConditionFalse, "Pending"),
			sbx(sandlotv1.SandboxPending, metav1.ConditionFalse, sandlotv1.ReasonNoEligibleNode), "Warning"},
		{"paused", sbx(sandlotv1.SandboxRunning, metav1.ConditionTrue, "Running"),
			sbx(sandlotv1.SandboxPaused, metav1.ConditionFalse, "Paused"), "Normal"},
		{"resumed", sbx(sandlotv1.SandboxResuming, metav1.ConditionFalse, "Resuming"),
			sbx(sandlotv1.SandboxRunning, metav1.ConditionTrue, "Running"), "Normal"},
		{"another kind", snap(metav1.ConditionFalse), snap(metav1.ConditionTrue), "Normal"},
	}
	// A message longer than an Event takes (a Template's, naming a
	// thousand nodes) is cut, not refused by the API server.
	long := snap(metav1.ConditionTrue)
	long.Status.Conditions[0].Message = strings.Repeat("node-0001 ", 500)
	rec := events.NewFakeRecorder(1)
	recordTransitions(rec, snap(metav1.ConditionFalse), long)
	if e := <-rec.Events; len(e) > len("Normal Persisted ")+sandlotv1.MaxEventNote {
		t.Errorf("an Event of %d bytes: over the API server's limit", len(e))
	}
	for _, c := range cases {
		rec := events.NewFakeRecorder(1)
		recordTransitions(rec, c.orig, c.obj)
		got := ""
		select {
		case e := <-rec.Events:
			got = e[:len(c.want)]
			if c.want == "" {
				got = e
			}
		default:
		}
		if got != c.want {
			t.Errorf("%s: Event %q, want type %q", c.name, got, c.want)
		}
	}
}

package nodeagent

import (
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestConditionEvents: an Event per new status or reason, none for a
// message alone or a nil recorder, Warnings for the shared failure
// reasons and the agent's own, notes within the API server's limit.
func TestConditionEvents(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	sbx := &sandlotv1.Sandbox{}
	running := metav1.Condition{Type: sandlotv1.ConditionVMReady, Status: metav1.ConditionTrue, Reason: "VMRunning", Message: "runs"}
	old := []metav1.Condition{{Type: sandlotv1.ConditionVMReady, Status: metav1.ConditionTrue, Reason: "VMRunning", Message: "ran"}}
	conditionEvents(rec, sbx, nil, actionProbe, old, running, false)
	conditionEvents(nil, sbx, nil, actionProbe, nil, running, false)
	claim := metav1.Condition{Type: sandlotv1.ConditionVMReady, Status: metav1.ConditionFalse, Reason: sandlotv1.ReasonClaimFailed,
		Message: strings.Repeat("é", 600)}
	conditionEvents(rec, sbx, nil, actionClaim, old, claim, false)
	conditionEvents(rec, sbx, nil, actionData, nil,
		metav1.Condition{Type: sandlotv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "SnapshotFailed"}, true)
	if len(rec.Events) != 2 {
		t.Fatalf("%d Events, want 2 (a claim failure, a snapshot failure)", len(rec.Events))
	}
	if e := <-rec.Events; !strings.HasPrefix(e, "Warning ClaimFailed VMReady=False: é") || !utf8.ValidString(e) ||
		len(e) > len("Warning ClaimFailed ")+sandlotv1.MaxEventNote {
		t.Fatalf("claim Event %q (%d bytes), want a Warning with a valid note of at most %d bytes", e, len(e), sandlotv1.MaxEventNote)
	}
	if e := <-rec.Events; e != "Warning SnapshotFailed Ready=False" {
		t.Fatalf("snapshot Event %q, want a Warning for the agent's own failure reason", e)
	}
}

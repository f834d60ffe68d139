package nodeagent

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// EventSource is the reporting controller of the agent's Events.
const EventSource = "sandlot-agent"

// Actions of the agent's Events (events.k8s.io requires one).
const (
	actionProbe    = "ProbeVM"
	actionClaim    = "ActivateClaim"
	actionRollback = "Rollback"
	actionData     = "PersistData"
)

// ReasonClaimActivated: a claimed warm pool VM runs as its sandbox.
const ReasonClaimActivated = "ClaimActivated"

// event records one Event on regarding (related may be nil); a nil
// recorder records nothing.
func event(rec events.EventRecorder, regarding, related runtime.Object, warning bool, reason, action, note string) {
	if rec == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	rec.Eventf(regarding, related, typ, reason, action, "%s", sandlotv1.EventNote(note))
}

// conditionEvents records an Event for cur if it changed from its like in
// old (sandlotv1.Transitions), after the status write that set it.
// warning adds the agent's own failure reasons to the shared list.
func conditionEvents(rec events.EventRecorder, regarding, related runtime.Object, action string,
	old []metav1.Condition, cur metav1.Condition, warning bool) {
	i := slices.IndexFunc(old, func(c metav1.Condition) bool { return c.Type == cur.Type })
	var prev []metav1.Condition
	if i >= 0 {
		prev = old[i : i+1]
	}
	for _, t := range sandlotv1.Transitions(prev, []metav1.Condition{cur}) {
		event(rec, regarding, related, t.Warning || warning, t.Reason, action, t.Message)
	}
}

package writes

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// EventSource is the reporting controller of the controller's Events.
const EventSource = "sandlot-controller"

// recordTransitions emits one Event for the conditions of obj that changed
// between orig and obj (sandlotv1.Transitions, sandlotv1.Summarize), after
// its status write. A Sandbox's normal progress through a start (to
// Starting, to Running) is in its conditions only: an Event each was two
// of the ~10 API writes every create cost (bench-scale), on the path that
// runs 100 times a second. Its warnings, pauses, resumes and the rest, and
// every other kind's transitions, are still Events.
func recordTransitions(rec events.EventRecorder, orig, obj runtime.Object) {
	o, ok1 := orig.(sandlotv1.Conditioned)
	n, ok2 := obj.(sandlotv1.Conditioned)
	if rec == nil || !ok1 || !ok2 {
		return
	}
	t, ok := sandlotv1.Summarize(sandlotv1.Transitions(o.StatusConditions(), n.StatusConditions()))
	if !ok {
		return
	}
	typ := corev1.EventTypeNormal
	if t.Warning {
		typ = corev1.EventTypeWarning
	} else if startProgress(orig, obj) {
		return
	}
	rec.Eventf(obj, nil, typ, t.Reason, "Reconcile", "%s", sandlotv1.EventNote(t.Message))
}

// startProgress: obj is a Sandbox a fresh start moved on (from nothing,
// Pending or Starting to Starting or Running).
func startProgress(orig, obj runtime.Object) bool {
	o, ok1 := orig.(*sandlotv1.Sandbox)
	n, ok2 := obj.(*sandlotv1.Sandbox)
	if !ok1 || !ok2 {
		return false
	}
	from, to := o.Status.Phase, n.Status.Phase
	return (from == "" || from == sandlotv1.SandboxPending || from == sandlotv1.SandboxStarting) &&
		(to == sandlotv1.SandboxPending || to == sandlotv1.SandboxStarting || to == sandlotv1.SandboxRunning)
}

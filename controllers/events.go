package controllers

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
// its status write.
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
	}
	rec.Eventf(obj, nil, typ, t.Reason, "Reconcile", "%s", t.Message)
}

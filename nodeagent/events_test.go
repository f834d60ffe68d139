package nodeagent_test

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/nodeagent"
)

// events are the Events recorded on obj (core v1 reads the agent's
// events.k8s.io ones too), as "Type Reason: message" lines.
func (a *agent) events(obj client.Object) ([]string, error) {
	list := &corev1.EventList{}
	if err := a.c.List(context.Background(), list, client.InNamespace(a.ns)); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.UID == obj.GetUID() && e.ReportingController == nodeagent.EventSource {
			out = append(out, e.Type+" "+e.Reason+": "+e.Message)
		}
	}
	return out, nil
}

// waitEvent waits for an Event of typ and reason on obj whose message
// contains msg, and returns its line.
func (a *agent) waitEvent(obj client.Object, typ, reason, msg string) string {
	a.t.Helper()
	var found string
	a.eventually(fmt.Sprintf("%s Event %s on %s", typ, reason, obj.GetName()), func() error {
		evs, err := a.events(obj)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if strings.HasPrefix(e, typ+" "+reason+": ") && strings.Contains(e, msg) {
				found = e
				return nil
			}
		}
		return fmt.Errorf("events %q", evs)
	})
	return found
}

// noEvent fails the test if obj has an Event of reason (now).
func (a *agent) noEvent(obj client.Object, reason string) {
	a.t.Helper()
	evs, err := a.events(obj)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, e := range evs {
		if strings.Contains(e, " "+reason+": ") {
			a.t.Fatalf("unexpected Event %q on %s", e, obj.GetName())
		}
	}
}

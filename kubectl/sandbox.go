package kubectl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// sandboxState is one line saying where a sandbox is: its phase, node,
// the controller's reason and VMReady.
func sandboxState(s *sandlotv1.Sandbox) string {
	parts := []string{"phase " + or(string(s.Status.Phase))}
	if s.Status.NodeName != "" {
		parts[0] += " on " + s.Status.NodeName
	}
	if s.Status.Reason != "" {
		parts = append(parts, strings.TrimSuffix(s.Status.Reason+": "+s.Status.Message, ": "))
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionVMReady); c != nil {
		parts = append(parts, fmt.Sprintf("VMReady %s (%s, generation %d)", c.Status, c.Reason, c.ObservedGeneration))
	}
	return strings.Join(parts, ", ")
}

// readyLine is what a command prints once a sandbox is usable.
func readyLine(s *sandlotv1.Sandbox) string {
	return fmt.Sprintf("sandbox/%s ready: id %s, node %s, ip %s", s.Name, sandboxID(s), s.Status.NodeName, s.Status.PodIP)
}

// waitUsable waits until each named sandbox is usable at (at least) its
// generation in gens, and prints each one's ready line. A sandbox that
// fails, is deleted, or goes away ends the wait with an error. It
// returns the sandboxes as last seen, by name.
func (s *session) waitUsable(ctx context.Context, w *waitFlags, gens map[string]int64) ([]*sandlotv1.Sandbox, error) {
	names := slices.Sorted(maps.Keys(gens))
	reported := map[string]bool{}
	what := fmt.Sprintf("%d sandbox(es) to be usable", len(gens))
	if len(names) == 1 {
		what = "sandbox/" + names[0] + " to be usable"
	}
	last := make([]*sandlotv1.Sandbox, len(names))
	err := s.wait(ctx, w, what, &sandlotv1.SandboxList{}, names, func(objs objects, p *progress) (bool, error) {
		usable := 0
		for i, name := range names {
			o, ok := objs[name]
			if !ok {
				return false, fmt.Errorf("sandbox %s was deleted while waiting for it", name)
			}
			sbx := o.(*sandlotv1.Sandbox)
			last[i] = sbx
			p.show("sandbox/"+name, sandboxState(sbx))
			if err := sandboxFailed(sbx); err != nil {
				return false, err
			}
			if sbx.Usable(gens[name]) {
				usable++
				if !reported[name] {
					reported[name] = true
					fmt.Fprintln(s.out, readyLine(sbx))
				}
			}
		}
		return usable == len(gens), nil
	})
	return last, err
}

// sandboxFailed is why a sandbox will not become usable: it ended or is
// being deleted.
func sandboxFailed(sbx *sandlotv1.Sandbox) error {
	switch {
	case sbx.DeletionTimestamp != nil:
		return fmt.Errorf("sandbox %s is being deleted", sbx.Name)
	case sbx.Status.Phase.Terminal():
		return fmt.Errorf("sandbox %s %s: %s", sbx.Name, strings.ToLower(string(sbx.Status.Phase)),
			strings.TrimSuffix(sbx.Status.Reason+": "+sbx.Status.Message, ": "))
	}
	return nil
}

package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestBaseBuildRetried: a base build whose image is not on the node yet
// fails with ImageMissing, its attempt counted and its retry time in the
// Template's status; once the backoff passed a new builder boots, and
// with the image there (the probe passes) the base is Ready on attempt 2.
func TestBaseBuildRetried(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	missing := counter(t, "sandlot_template_build_failures_total", "reason", sandlotv1.ReasonImageMissing)
	h.addNode("retry-node", "8", "16Gi", nil)
	tpl := h.acceptedTemplate("late-image", 512)
	first := h.waitPhase(h.baseBuilder("late-image"), sandlotv1.SandboxStarting)
	h.setPod(first.Status.PodName, corev1.PodPending, "", func(st *corev1.PodStatus) {
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: "sandbox", Image: tpl.Spec.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}}}
	})
	failed := h.baseEntry("late-image", "retry-node", func(e sandlotv1.BaseSnapshot) error {
		if e.Phase != sandlotv1.BaseFailed || e.Reason != sandlotv1.ReasonImageMissing || e.Attempts != 1 || e.RetryAt == nil {
			return fmt.Errorf("entry %+v, want Failed ImageMissing on attempt 1 with a retry time", e)
		}
		return nil
	})
	if wait := time.Until(failed.RetryAt.Time); wait > 20*time.Second {
		t.Fatalf("first retry in %v, want about 15s", wait)
	}
	h.eventually(5*time.Second, "the failed attempt counted", func() error {
		if got := counter(t, "sandlot_template_build_failures_total", "reason", sandlotv1.ReasonImageMissing) - missing; got != 1 {
			return fmt.Errorf("ImageMissing build failures moved by %v, want 1", got)
		}
		return nil
	})
	h.gone(first)
	h.baseEntry("late-image", "retry-node", func(e sandlotv1.BaseSnapshot) error {
		if e.Phase != sandlotv1.BaseBuilding || e.Attempts != 2 || e.RetryAt != nil {
			return fmt.Errorf("entry %+v, want attempt 2 Building", e)
		}
		return nil
	})
	h.buildBases("late-image")
	h.baseEntry("late-image", "retry-node", func(e sandlotv1.BaseSnapshot) error {
		if e.Phase != sandlotv1.BaseReady || e.Attempts != 2 {
			return fmt.Errorf("entry %+v, want Ready on attempt 2", e)
		}
		return nil
	})
}

// counter is the value of the counter name's series whose label is value
// in the controller's registry (0 when it has none yet).
func counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// baseBuilder waits for a builder of the template (no build steps).
func (h *harness) baseBuilder(tplName string) string {
	h.t.Helper()
	var name string
	h.eventually(10*time.Second, "a builder of "+tplName, func() error {
		list := &sandlotv1.SandboxList{}
		if err := h.c.List(context.Background(), list, client.InNamespace(h.ns)); err != nil {
			return err
		}
		for _, s := range list.Items {
			if s.Annotations[sandlotv1.AnnotationBaseOf] == tplName && s.DeletionTimestamp == nil {
				name = s.Name
				return nil
			}
		}
		return fmt.Errorf("none of %d sandboxes", len(list.Items))
	})
	return name
}

// baseEntry waits until the template's current entry for node passes
// check, and returns it.
func (h *harness) baseEntry(tplName, node string, check func(sandlotv1.BaseSnapshot) error) sandlotv1.BaseSnapshot {
	h.t.Helper()
	var got sandlotv1.BaseSnapshot
	h.eventually(40*time.Second, "the base entry of "+tplName+" on "+node, func() error {
		tpl := &sandlotv1.Template{}
		if err := h.c.Get(context.Background(), h.key(tplName), tpl); err != nil {
			return err
		}
		for _, e := range tpl.Status.BaseSnapshots {
			if e.Node == node && e.Revision == tpl.Status.BaseRevision {
				got = e
				return check(e)
			}
		}
		return fmt.Errorf("no entry in %+v", tpl.Status.BaseSnapshots)
	})
	return got
}

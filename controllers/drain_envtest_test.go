package controllers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers"
	"github.com/sandlot-dev/sandlot/controllers/drain"
)

// TestDrainMovesSandbox: its node cordoned, a running sandbox is paused
// there and, once its package is in the shared store, resumed on the
// other node — same sandbox ID — and its pod was under a budget that
// allows no eviction meanwhile.
func TestDrainMovesSandbox(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startControllerWith(t, controllers.Options{SharedStore: true})
	h.addNode("drain-a", "8", "16Gi", nil)
	h.template("python", 512)
	before := h.running(newSandbox("mover", sandlotv1.SandboxSource{Template: "python"}), "10.88.9.1")
	h.addNode("drain-b", "8", "16Gi", nil)
	h.eventually(10*time.Second, "the namespace's sandbox budget", func() error {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: drain.BudgetName}, pdb); err != nil {
			return err
		}
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 0 {
			return errorf("budget %+v", pdb.Spec)
		}
		return nil
	})

	h.cordon("drain-a", true)
	h.eventually(10*time.Second, "mover marked to move off drain-a", func() error {
		if got := h.sandbox("mover").Annotations[sandlotv1.AnnotationMoveFrom]; got != "drain-a" {
			return errorf("move-from %q", got)
		}
		return h.hasEvent(before.UID, sandlotv1.ReasonMoving)
	})
	h.eventually(10*time.Second, "the move's pause package", func() error {
		return h.c.Get(context.Background(), h.key("mover"), &sandlotv1.PausedSandbox{})
	})
	h.finishRemotePause("mover")
	moved := h.waitPhase("mover", sandlotv1.SandboxResuming)
	if moved.Status.NodeName != "drain-b" {
		t.Fatalf("resumes on %q, want drain-b", moved.Status.NodeName)
	}
	h.setPod(moved.Status.PodName, corev1.PodRunning, "10.88.9.2")
	h.eventually(10*time.Second, "mover Running on drain-b, unmarked", func() error {
		s := h.sandbox("mover")
		if s.Status.Phase != sandlotv1.SandboxRunning || s.Annotations[sandlotv1.AnnotationMoveFrom] != "" {
			return errorf("phase %s, move-from %q", s.Status.Phase, s.Annotations[sandlotv1.AnnotationMoveFrom])
		}
		return h.hasEvent(before.UID, sandlotv1.ReasonMoved)
	})
	if s := h.sandbox("mover"); s.Status.SandboxID != before.Status.SandboxID || s.Spec.Paused {
		t.Fatalf("moved as %s (paused %v), was %s", s.Status.SandboxID, s.Spec.Paused, before.Status.SandboxID)
	}
}

// TestDrainBlockedSaysWhy: a sandbox that cannot move (no other node; a
// local store) stays where it runs and says why.
func TestDrainBlockedSaysWhy(t *testing.T) {
	for name, c := range map[string]struct {
		shared bool
		want   string
	}{"no other node": {true, "no other node"}, "local store": {false, "the store is local"}} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.runKubelet()
			startControllerWith(t, controllers.Options{SharedStore: c.shared})
			node := "blocked-" + strings.ReplaceAll(name, " ", "-")
			h.addNode(node, "8", "16Gi", nil)
			h.template("python", 512)
			s := h.running(newSandbox("stuck", sandlotv1.SandboxSource{Template: "python"}), "10.88.9.3")
			h.cordon(node, true)
			h.eventually(10*time.Second, "stuck says why it cannot move", func() error {
				got := h.sandbox("stuck").Annotations[sandlotv1.AnnotationMoveBlocked]
				if !strings.Contains(got, c.want) {
					return errorf("move-blocked %q, want %q", got, c.want)
				}
				return h.hasEvent(s.UID, sandlotv1.ReasonCannotMove)
			})
			h.consistently(2*time.Second, "stuck runs on, unpaused", func() error {
				got := h.sandbox("stuck")
				if got.Status.Phase != sandlotv1.SandboxRunning || got.Annotations[sandlotv1.AnnotationMoveFrom] != "" {
					return errorf("phase %s, move-from %q", got.Status.Phase, got.Annotations[sandlotv1.AnnotationMoveFrom])
				}
				return nil
			})
			h.cordon(node, false)
			h.eventually(10*time.Second, "uncordoned: the reason goes", func() error {
				if got := h.sandbox("stuck").Annotations[sandlotv1.AnnotationMoveBlocked]; got != "" {
					return errorf("move-blocked %q", got)
				}
				return nil
			})
		})
	}
}

// cordon sets a node's spec.unschedulable, as kubectl cordon does.
func (h *harness) cordon(node string, on bool) {
	h.t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": on}})
	n := &corev1.Node{}
	n.Name = node
	if err := h.c.Patch(context.Background(), n, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		h.t.Fatalf("cordon %s: %v", node, err)
	}
}

// finishRemotePause plays the node agent: the pause package is Ready and
// in the shared store.
func (h *harness) finishRemotePause(name string) {
	h.t.Helper()
	h.eventually(5*time.Second, "package ready and remote", func() error {
		pkg := &sandlotv1.PausedSandbox{}
		if err := h.c.Get(context.Background(), h.key(name), pkg); err != nil {
			return err
		}
		pkg.Status.Phase, pkg.Status.Location = sandlotv1.DataReady, "store://paused/"+name
		pkg.Status.RemoteStatus = sandlotv1.RemoteReady
		return h.c.Status().Update(context.Background(), pkg)
	})
}

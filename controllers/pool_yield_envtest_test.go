package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestPoolPodsGiveWayToStarts: a node full of one template's start slots
// and another workload's pod; a sandbox that no node has room for (from a
// snapshot on that node, no slot of its own) gets one slot given up for
// it, not the other workload's pod, and is placed there; the pool does
// not take the room back before it is.
func TestPoolPodsGiveWayToStarts(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("yield-a", "2500m", "16Gi", nil)
	h.acceptedTemplate("python", 512)
	h.basesOn("python", "yield-a")
	h.editTemplate("python", func(spec *sandlotv1.TemplateSpec) { spec.Slots = ptr.To[int32](2) })
	slots := h.runPool("python", 2)
	ns := h.otherNamespace()
	h.otherPod(ns, "db", "yield-a", "1Gi")

	h.readySnapshot("yield-src", "yield-a", sandlotv1.RemoteNotApplicable, 512)
	h.create(newSandbox("intruder", sandlotv1.SandboxSource{Snapshot: "yield-src"}))
	sbx := h.waitPhase("intruder", sandlotv1.SandboxStarting)
	if sbx.Status.NodeName != "yield-a" || sbx.Status.PodName != "intruder" {
		t.Fatalf("placed on %q in pod %q, want its own pod on yield-a", sbx.Status.NodeName, sbx.Status.PodName)
	}
	gone := 0
	for name := range slots {
		err := h.c.Get(context.Background(), h.key(name), &corev1.Pod{})
		if client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		if err != nil {
			gone++
		}
	}
	if gone != 1 {
		t.Fatalf("%d of the 2 slots gave way, want 1", gone)
	}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "db"}, &corev1.Pod{}); err != nil {
		t.Fatalf("the other workload's pod: %v", err)
	}
	h.eventually(10*time.Second, "an Event saying pool pods gave way", func() error {
		return h.hasEvent(sbx.UID, sandlotv1.ReasonReclaimingPoolPods)
	})
	h.eventually(10*time.Second, "intruder's pod on yield-a", func() error {
		if p := h.pod("intruder"); p.Spec.NodeName != "yield-a" {
			return fmt.Errorf("pod on %q", p.Spec.NodeName)
		}
		return nil
	})
}

package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestStartSlots: a template without a warm pool keeps spec.slots start
// slots per node (pods with no VM); sandboxes created at once claim them,
// one each, with their node's base to restore in the claim; the one left
// over gets a pod of its own; the slots refill once the claims are
// carried out; a sandbox from a Snapshot
// of the template claims a slot on the data's node to restore it in.
func TestStartSlots(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("slots-a", "16", "32Gi", nil)
	h.addNode("slots-b", "16", "32Gi", nil)
	h.acceptedTemplate("python", 512)
	h.basesOn("python", "slots-a", "slots-b")
	h.editTemplate("python", func(spec *sandlotv1.TemplateSpec) { spec.Slots = ptr.To[int32](1) })
	slots := h.runPool("python", 2)
	for name := range slots {
		if a, err := sandlotv1.DecodeVMAnnotations(h.pod(name).Annotations); err != nil || !a.Slot || a.Restore != nil {
			t.Fatalf("pool pod %s is no empty start slot: %+v (%v)", name, a, err)
		}
	}
	h.waitSlots("python", 1, "slots-a", "slots-b")

	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			h.create(newSandbox(fmt.Sprintf("slotted-%d", i), sandlotv1.SandboxSource{Template: "python"}))
		})
	}
	wg.Wait()
	claimed := h.claimsOf(slots, "slotted-", 3)
	if len(claimed) != 2 {
		t.Fatalf("slots claimed %v: want both", claimed)
	}
	tpl := &sandlotv1.Template{}
	if err := h.c.Get(context.Background(), h.key("python"), tpl); err != nil {
		t.Fatal(err)
	}
	for pod, sbx := range claimed {
		p := h.pod(pod)
		a, _ := sandlotv1.DecodeVMAnnotations(p.Annotations)
		base := baseOn(tpl, p.Spec.NodeName)
		if a.Claim == nil || a.Claim.Sandbox != sbx || a.Claim.Restore == nil || a.Claim.Restore.Name != base {
			t.Fatalf("slot %s on %s claimed by %s: claim %+v, want its node's base %s restored", pod, p.Spec.NodeName, sbx, a.Claim, base)
		}
		if got := h.sandbox(sbx).Status.BaseSnapshot; got != base {
			t.Fatalf("%s records base %q, want %q", sbx, got, base)
		}
	}
	if n := h.unclaimedPool("python"); n != 0 {
		t.Fatalf("%d slots refilled while both claims were being carried out", n)
	}
	for pod := range claimed {
		h.activateClaim(pod) // refills wait until then
	}
	refilled := h.runPool("python", 2)
	for name := range refilled {
		if slots[name] {
			t.Fatalf("slot %s still unclaimed after the claims: want both refilled", name)
		}
	}

	snap := h.readySnapshot("slot-src", "slots-b", sandlotv1.RemoteNotApplicable, 512)
	h.setSnapshot("slot-src", func(st *sandlotv1.SnapshotStatus) { st.Template = "python" })
	h.create(newSandbox("slot-child", sandlotv1.SandboxSource{Snapshot: "slot-src"}))
	child := h.claimsOf(refilled, "slot-child", 1)
	for pod := range child {
		p := h.pod(pod)
		if src := sandlotv1.PodSource(p.Annotations); p.Spec.NodeName != "slots-b" || src == nil || src.UID != string(snap.UID) {
			t.Fatalf("slot %s on %s restores %+v, want the snapshot on slots-b", pod, p.Spec.NodeName, src)
		}
	}
	if len(child) != 1 {
		t.Fatalf("the snapshot's sandbox claimed %v, want slots-b's slot", child)
	}
}

// activateClaim plays the node agent: the claim of pool pod name is
// carried out.
func (h *harness) activateClaim(name string) {
	h.t.Helper()
	pod := h.pod(name)
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Annotations[sandlotv1.AnnotationClaimActivated] = pod.Annotations[sandlotv1.AnnotationClaim]
	if err := h.c.Patch(context.Background(), pod, patch); err != nil {
		h.t.Fatal(err)
	}
}

// claimsOf waits until n sandboxes named prefix* have pods and returns
// which of the pods in pool they claimed (pod → sandbox), failing if one
// was claimed twice.
func (h *harness) claimsOf(pool map[string]bool, prefix string, n int) map[string]string {
	h.t.Helper()
	claimed := map[string]string{}
	h.eventually(20*time.Second, fmt.Sprintf("%d sandboxes %s* placed", n, prefix), func() error {
		clear(claimed)
		list := &sandlotv1.SandboxList{}
		if err := h.c.List(context.Background(), list); err != nil {
			return err
		}
		placed := 0
		for _, s := range list.Items {
			if !strings.HasPrefix(s.Name, prefix) || s.Status.PodName == "" {
				continue
			}
			placed++
			if !pool[s.Status.PodName] {
				continue
			}
			if other, dup := claimed[s.Status.PodName]; dup {
				h.t.Fatalf("pool pod %s claimed by %s and %s", s.Status.PodName, other, s.Name)
			}
			claimed[s.Status.PodName] = s.Name
		}
		if placed != n {
			return errorf("%d placed", placed)
		}
		return nil
	})
	return claimed
}

// waitSlots waits until the template's status counts n running start
// slots on each node.
func (h *harness) waitSlots(tpl string, n int32, nodes ...string) {
	h.t.Helper()
	h.eventually(20*time.Second, fmt.Sprintf("%d slots of %s on %v", n, tpl, nodes), func() error {
		got := &sandlotv1.Template{}
		if err := h.c.Get(context.Background(), h.key(tpl), got); err != nil {
			return err
		}
		ok := 0
		for _, p := range got.Status.Pool {
			if p.Slots == n {
				ok++
			}
		}
		if ok != len(nodes) {
			return errorf("pools %+v", got.Status.Pool)
		}
		return nil
	})
}

// baseOn is the template's current base Snapshot on node.
func baseOn(tpl *sandlotv1.Template, node string) string {
	for _, b := range tpl.Status.BaseSnapshots {
		if b.Node == node && b.Revision == tpl.Status.BaseRevision {
			return b.Snapshot
		}
	}
	return ""
}

package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestSlotsThroughFailures: a start slot deleted under its claim (the
// node agents down, so the claim is not carried out yet) sends its
// sandbox back to placement, and it runs in another pod with its own
// identity once the agents are back; a node whose kubelet stopped keeps
// its slot, which no start claims: sandboxes created meanwhile run on the
// other node.
func TestSlotsThroughFailures(t *testing.T) {
	k := sbxtest.Client(t, c)
	tpl := probedTemplate(t, k, "slotfail", interpreterProbe, sbxtest.DefaultImage(t))
	setPool(t, k, tpl, `{"spec":{"slots":1}}`)
	slots := waitSlots(t, k, tpl, 1)
	seen := map[string]string{}

	restart := withAgentsDown(t)
	lost := claimedSlot(t, k, "slotfail-lost", slots)
	uid := lost.UID
	if err := k.Delete(context.Background(), lost, client.Preconditions{UID: &uid}); err != nil {
		t.Fatalf("delete the claimed slot %s: %v", lost.Name, err)
	}
	restart()
	s := waitUsable(t, k, "slotfail-lost", 1)
	pod := &corev1.Pod{}
	if err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: s.Status.PodName}, pod); err != nil {
		t.Fatal(err)
	}
	if pod.UID == uid {
		t.Fatalf("runs in the deleted slot %s", lost.Name)
	}
	distinct(t, k, s, seen)
	t.Logf("slot %s deleted under the claim of %s, which then ran in %s on %s", lost.Name, s.Name, pod.Name, s.Status.NodeName)

	slots = waitSlots(t, k, tpl, 1)
	down, up := c.Nodes[0].Name, c.Nodes[1].Name
	withKubeletDown(t, k, down)
	for name, s := range sbxtest.Create(t, k, "slotfail", "slotfail-b1", "slotfail-b2") {
		if s.Status.NodeName != up {
			t.Fatalf("%s runs on %s, whose kubelet is down", name, s.Status.NodeName)
		}
		distinct(t, k, s, seen)
		t.Logf("%s runs in %s on %s while %s is NotReady", name, s.Status.PodName, up, down)
	}
	for uid := range slots {
		if p := podByUID(t, k, uid); p.Spec.NodeName == down && p.Labels[sandlotv1.LabelSandbox] != "" {
			t.Fatalf("slot %s of %s (kubelet down) was claimed by %s", p.Name, down, p.Labels[sandlotv1.LabelSandbox])
		}
	}
}

// withAgentsDown stops every node agent (claims wait) and returns what
// starts them again, which also runs when the test ends.
func withAgentsDown(t *testing.T) func() {
	t.Helper()
	return sbxtest.StopAgents(t, c, sbxtest.NodeNames(c)...)
}

// claimedSlot creates a sandbox of the slotfail template and returns the
// slot it claimed.
func claimedSlot(t *testing.T, k client.Client, name string, slots map[types.UID]bool) *corev1.Pod {
	t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "slotfail"}, TimeoutSeconds: ptr.To[int32](1800)}}
	if err := k.Create(context.Background(), sbx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbxtest.Delete(t, k, name) })
	pod := &corev1.Pod{}
	poll.Eventually(t, time.Minute, name+" claims a slot", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err != nil {
			return err
		}
		if sbx.Status.PodName == "" {
			return fmt.Errorf("no pod yet: %+v", sbx.Status.Conditions)
		}
		if err := k.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: sbx.Status.PodName}, pod); err != nil {
			return err
		}
		if !slots[pod.UID] {
			t.Fatalf("%s started pod %s, not one of the slots %v", name, pod.Name, slots)
		}
		return nil
	})
	return pod
}

// withKubeletDown stops node's kubelet until the test ends and waits
// until the node is NotReady.
func withKubeletDown(t *testing.T, k client.Client, node string) {
	t.Helper()
	if err := c.KillKubelet(node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RestartKubelet(node); err != nil {
			t.Errorf("restart the kubelet of %s: %v", node, err)
		}
	})
	sbxtest.WaitNotReady(t, k, node)
}

// podByUID is the default namespace's pod of that UID.
func podByUID(t *testing.T, k client.Client, uid types.UID) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k.List(context.Background(), pods, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if pods.Items[i].UID == uid {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no pod %s", uid)
	return nil
}

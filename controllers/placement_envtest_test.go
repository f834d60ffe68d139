package controllers_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestPlacementCountsOtherPodsAndHonoursTaints, on two nodes with the
// template's base on both: another workload's pod filling the roomier
// node sends a sandbox to the other; a taint the template does not
// tolerate keeps sandboxes off a node (and says so when nothing else
// fits) until the template tolerates it, and the pod then carries the
// toleration.
func TestPlacementCountsOtherPodsAndHonoursTaints(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	stop := startController(t)
	h.addNode("taint-a", "8", "16Gi", nil)
	h.addNode("taint-b", "8", "8Gi", nil)
	h.template("python", 512)
	h.basesOn("python", "taint-a", "taint-b")
	// Each world below is set up with the controller stopped, so the
	// controller started next reads it from caches synced before its first
	// reconcile (no wait for a watch to deliver it).
	stop()

	// Another team's pod, not sandlot's, fills taint-a.
	other := h.otherNamespace()
	h.otherPod(other, "big", "taint-a", "15.5Gi")
	stop = startController(t)
	if s := h.startedOn("s1"); s != "taint-b" {
		t.Fatalf("s1 placed on %q, want taint-b: taint-a is full of another workload's pod", s)
	}
	stop()

	// taint-a tainted (and emptied), taint-b full.
	h.deleteOtherPod(other, "big")
	h.taint("taint-a", corev1.Taint{Key: "dedicated", Value: "sandbox", Effect: corev1.TaintEffectNoSchedule})
	h.otherPod(other, "fill-b", "taint-b", "7Gi")
	startController(t)
	h.create(newSandbox("s3", sandlotv1.SandboxSource{Template: "python"}))
	h.eventually(10*time.Second, "s3 pending", func() error {
		s := h.sandbox("s3")
		if c := condition(s.Status.Conditions, sandlotv1.ConditionScheduled); c.Reason != sandlotv1.ReasonNoEligibleNode {
			return errorf("phase %s, Scheduled %s: %s", s.Status.Phase, c.Reason, c.Message)
		}
		return nil
	})
	msg := condition(h.sandbox("s3").Status.Conditions, sandlotv1.ConditionScheduled).Message
	mustContain(t, "message", msg, "1 insufficient memory")
	mustContain(t, "message", msg, "1 untolerated taint dedicated=sandbox:NoSchedule")

	tol := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "sandbox", Effect: corev1.TaintEffectNoSchedule}
	h.editTemplate("python", func(spec *sandlotv1.TemplateSpec) { spec.Tolerations = []corev1.Toleration{tol} })
	if s := h.waitPhase("s3", sandlotv1.SandboxStarting); s.Status.NodeName != "taint-a" {
		t.Fatalf("s3 placed on %q, want the now tolerated taint-a", s.Status.NodeName)
	}
	if pod := h.pod("s3"); !slices.Contains(pod.Spec.Tolerations, tol) {
		t.Fatalf("pod tolerations = %v, want %v among them", pod.Spec.Tolerations, tol)
	}
}

// basesOn plays kubelet and agent until the template's base is Ready on
// every one of nodes.
func (h *harness) basesOn(tpl string, nodes ...string) {
	h.t.Helper()
	h.eventually(30*time.Second, "bases of "+tpl+" on "+nodes[0]+"...", func() error {
		h.buildBases(tpl)
		got := &sandlotv1.Template{}
		if err := h.c.Get(context.Background(), h.key(tpl), got); err != nil {
			return err
		}
		for _, n := range nodes {
			if !slices.ContainsFunc(got.Status.BaseSnapshots, func(b sandlotv1.BaseSnapshot) bool {
				return b.Node == n && b.Revision == got.Status.BaseRevision && b.Phase == sandlotv1.BaseReady
			}) {
				return errorf("no Ready base on %s: %+v", n, got.Status.BaseSnapshots)
			}
		}
		return nil
	})
}

// startedOn creates a sandbox of the python template and returns its node
// once it is Starting.
func (h *harness) startedOn(name string) string {
	h.t.Helper()
	h.create(newSandbox(name, sandlotv1.SandboxSource{Template: "python"}))
	return h.waitPhase(name, sandlotv1.SandboxStarting).Status.NodeName
}

// otherNamespace is a namespace of some other workload's.
func (h *harness) otherNamespace() string {
	h.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "other-"}}
	if err := h.c.Create(context.Background(), ns); err != nil {
		h.t.Fatal(err)
	}
	return ns.Name
}

// otherPod binds a pod that is not sandlot's to node, requesting mem; it
// is removed when the test ends.
func (h *harness) otherPod(ns, name, node, mem string) {
	h.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
		NodeName: node, AutomountServiceAccountToken: ptr.To(false),
		Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse(mem)}}}},
	}}
	if err := h.c.Create(context.Background(), pod); err != nil {
		h.t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	h.t.Cleanup(func() { h.deleteOtherPod(ns, name) })
}

func (h *harness) deleteOtherPod(ns, name string) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := h.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		h.t.Errorf("delete pod %s/%s: %v", ns, name, err)
	}
}

// taint adds a taint to a node.
func (h *harness) taint(node string, t corev1.Taint) {
	h.t.Helper()
	n := &corev1.Node{}
	if err := h.c.Get(context.Background(), types.NamespacedName{Name: node}, n); err != nil {
		h.t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Spec.Taints = append(n.Spec.Taints, t)
	if err := h.c.Patch(context.Background(), n, patch); err != nil {
		h.t.Fatalf("taint node %s: %v", node, err)
	}
}

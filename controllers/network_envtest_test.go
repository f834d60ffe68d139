package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// The node agent is not running here: the tests set the pod's
// AnnotationNetworkApplied as it would once the shim enforces the rules.

var (
	fenced = &sandlotv1.SandboxNetwork{AllowOut: []string{"example.com", "8.8.8.0/24"}, AllowInternetAccess: new(false)}
	opened = &sandlotv1.SandboxNetwork{DenyOut: []string{"10.0.0.0/8"}}
	// refusedNet passes the CRD's CEL (a digits-only name) but not
	// ParseNetwork: the controller's own check.
	refusedNet = &sandlotv1.SandboxNetwork{AllowOut: []string{"999.1.1.1"}}
)

func encoded(t *testing.T, n *sandlotv1.SandboxNetwork) string {
	t.Helper()
	v, err := sandlotv1.EncodeNetwork(n)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// podNetwork waits until pod name's AnnotationNetwork is want's encoding
// and returns the pod.
func (h *harness) podNetwork(name string, want *sandlotv1.SandboxNetwork) *corev1.Pod {
	h.t.Helper()
	enc := encoded(h.t, want)
	var pod *corev1.Pod
	h.eventually(10*time.Second, "pod "+name+" carries the rules", func() error {
		pod = &corev1.Pod{}
		if err := h.c.Get(context.Background(), h.key(name), pod); err != nil {
			return err
		}
		if got, ok := pod.Annotations[sandlotv1.AnnotationNetwork]; got != enc || (enc == "" && ok) {
			return errorf("annotation %s = %q, want %q", sandlotv1.AnnotationNetwork, got, enc)
		}
		return nil
	})
	return pod
}

// applyNetwork plays the node agent: pod name enforces its AnnotationNetwork.
func (h *harness) applyNetwork(name string) {
	h.t.Helper()
	pod := h.pod(name)
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Annotations[sandlotv1.AnnotationNetworkApplied] = pod.Annotations[sandlotv1.AnnotationNetwork]
	if err := h.c.Patch(context.Background(), pod, patch); err != nil {
		h.t.Fatalf("agent's applied annotation on %s: %v", name, err)
	}
}

// waitNetwork waits for the sandbox's NetworkApplied condition (at its
// generation) and status.network.
func (h *harness) waitNetwork(name string, status metav1.ConditionStatus, reason string, enforced *sandlotv1.SandboxNetwork) *sandlotv1.Sandbox {
	h.t.Helper()
	var s *sandlotv1.Sandbox
	h.eventually(10*time.Second, "sandbox "+name+" NetworkApplied "+string(status)+" "+reason, func() error {
		s = h.sandbox(name)
		c := condition(s.Status.Conditions, sandlotv1.ConditionNetworkApplied)
		if c.Status != status || c.Reason != reason || c.ObservedGeneration != s.Generation {
			return errorf("NetworkApplied %s %s (gen %d of %d): %s", c.Status, c.Reason, c.ObservedGeneration, s.Generation, c.Message)
		}
		if !equality.Semantic.DeepEqual(s.Status.Network, enforced) {
			return errorf("status.network %+v, want %+v", s.Status.Network, enforced)
		}
		return nil
	})
	return s
}

// TestNetworkRulesLive: the pod carries spec.network; an edit patches the
// same pod's annotation (no restart); the status shows what the agent
// applied; a refused edit leaves the pod's rules and says why.
func TestNetworkRulesLive(t *testing.T) {
	h := withController(t, "net-node", 512)
	sbx := newSandbox("fenced", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.Network = fenced
	h.running(sbx, "10.88.9.1")
	first := h.podNetwork("fenced", fenced)
	h.waitNetwork("fenced", metav1.ConditionFalse, sandlotv1.ReasonNetworkPending, nil)
	h.applyNetwork("fenced")
	h.waitNetwork("fenced", metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, fenced)

	h.editSpec("fenced", func(spec *sandlotv1.SandboxSpec) { spec.Network = opened })
	if pod := h.podNetwork("fenced", opened); pod.UID != first.UID {
		t.Fatalf("the pod was replaced (uid %s, was %s): a rule change must be live", pod.UID, first.UID)
	}
	h.waitNetwork("fenced", metav1.ConditionFalse, sandlotv1.ReasonNetworkPending, fenced) // the old rules hold meanwhile
	h.applyNetwork("fenced")
	h.waitNetwork("fenced", metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, opened)

	s := h.editSpec("fenced", func(spec *sandlotv1.SandboxSpec) { spec.Network = refusedNet })
	h.waitNetwork("fenced", metav1.ConditionFalse, sandlotv1.ReasonInvalidNetwork, opened)
	h.eventually(10*time.Second, "an InvalidNetwork event", func() error { return h.hasEvent(s.UID, sandlotv1.ReasonInvalidNetwork) })
	mustContain(t, "message", condition(h.sandbox("fenced").Status.Conditions, sandlotv1.ConditionNetworkApplied).Message, `"999.1.1.1"`)
	h.consistently(time.Second, "the refused rules never reach the pod", func() error {
		if got := h.pod("fenced").Annotations[sandlotv1.AnnotationNetwork]; got != encoded(t, opened) {
			return errorf("pod annotation %q", got)
		}
		return nil
	})
	if s := h.sandbox("fenced"); s.Status.Phase != sandlotv1.SandboxRunning {
		t.Fatalf("a refused rule edit stopped the sandbox: %+v", s.Status)
	}

	h.editSpec("fenced", func(spec *sandlotv1.SandboxSpec) { spec.Network = nil })
	h.podNetwork("fenced", nil)
	h.applyNetwork("fenced") // the agent records the defaults it went back to
	h.waitNetwork("fenced", metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, nil)
}

// TestInvalidNetworkStartsNoPod: a spec.network ParseNetwork refuses
// keeps the sandbox Pending without a pod, with a Warning; fixed, it starts.
func TestInvalidNetworkStartsNoPod(t *testing.T) {
	h := withController(t, "badnet-node", 512)
	sbx := newSandbox("badnet", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.Network = refusedNet
	h.create(sbx)
	h.eventually(10*time.Second, "InvalidNetwork", func() error {
		if s := h.sandbox("badnet"); s.Status.Phase != sandlotv1.SandboxPending || s.Status.Reason != sandlotv1.ReasonInvalidNetwork {
			return errorf("status %s %s: %s", s.Status.Phase, s.Status.Reason, s.Status.Message)
		}
		return nil
	})
	h.waitNetwork("badnet", metav1.ConditionFalse, sandlotv1.ReasonInvalidNetwork, nil)
	h.eventually(10*time.Second, "a Warning event", func() error { return h.hasEvent(h.sandbox("badnet").UID, sandlotv1.ReasonInvalidNetwork) })
	if err := h.c.Get(context.Background(), h.key("badnet"), &corev1.Pod{}); err == nil {
		t.Fatal("a pod was created with refused rules")
	}
	h.editSpec("badnet", func(spec *sandlotv1.SandboxSpec) { spec.Network = fenced })
	h.waitPhase("badnet", sandlotv1.SandboxStarting)
	h.podNetwork("badnet", fenced)
}

// TestNetworkRulesKeptAcrossPause: a paused sandbox enforces nothing (no
// VM); its rules, edited while paused, are on the pod it resumes in on
// another node.
func TestNetworkRulesKeptAcrossPause(t *testing.T) {
	h := withController(t, "netpause-a", 512)
	sbx := newSandbox("napper", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.Network = fenced
	h.running(sbx, "10.88.9.2")
	h.applyNetwork("napper")
	h.waitNetwork("napper", metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, fenced)

	h.pause("napper")
	h.finishPause("napper")
	h.waitPhase("napper", sandlotv1.SandboxPaused)
	h.waitNetwork("napper", metav1.ConditionFalse, sandlotv1.ReasonNetworkPending, nil)
	h.editSpec("napper", func(spec *sandlotv1.SandboxSpec) { spec.Network = opened }) // as E2B's PUT .../network of a paused sandbox

	// The package reached shared storage and its node takes no more VMs.
	h.eventually(5*time.Second, "package remote Ready", func() error {
		pkg := &sandlotv1.PausedSandbox{}
		if err := h.c.Get(context.Background(), h.key("napper"), pkg); err != nil {
			return err
		}
		pkg.Status.RemoteStatus = sandlotv1.RemoteReady
		return h.c.Status().Update(context.Background(), pkg)
	})
	h.addNode("netpause-b", "8", "16Gi", nil)
	h.taint("netpause-a", corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule})
	h.editSpec("napper", func(spec *sandlotv1.SandboxSpec) { spec.Paused = false })
	if s := h.waitPhase("napper", sandlotv1.SandboxResuming); s.Status.NodeName != "netpause-b" {
		t.Fatalf("resumed on %q, want netpause-b", s.Status.NodeName)
	}
	pod := h.podNetwork("napper", opened)
	if pod.Annotations[sandlotv1.AnnotationRestoreKind] != sandlotv1.RestoreKindPausedSandbox || pod.Spec.NodeName != "netpause-b" {
		t.Fatalf("resume pod on %s, annotations %v", pod.Spec.NodeName, pod.Annotations)
	}
	h.setPod("napper", corev1.PodRunning, "10.88.9.3")
	h.waitPhase("napper", sandlotv1.SandboxRunning)
	h.applyNetwork("napper")
	h.waitNetwork("napper", metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, opened)
}

// TestWarmPoolClaimCarriesNetwork: the claim's patch sets the sandbox's
// rules on the pool pod; a later edit patches that pod too.
func TestWarmPoolClaimCarriesNetwork(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("netpool-node", "8", "16Gi", nil)
	h.template("python", 512)
	h.editTemplate("python", func(spec *sandlotv1.TemplateSpec) { spec.WarmPool = 1 })
	pool := h.runPool("python", 1)
	sbx := newSandbox("pooled", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.Network = fenced
	h.create(sbx)
	var name string
	h.eventually(10*time.Second, "claimed a pool pod", func() error {
		if name = h.sandbox("pooled").Status.PodName; !pool[name] {
			return errorf("pod %q is not one of the pool's %v", name, pool)
		}
		return nil
	})
	pod := h.podNetwork(name, fenced)
	if pod.Annotations[sandlotv1.AnnotationClaim] == "" {
		t.Fatalf("claimed pod annotations %v", pod.Annotations)
	}
	h.waitNetwork("pooled", metav1.ConditionFalse, sandlotv1.ReasonNetworkPending, nil)
	h.editSpec("pooled", func(spec *sandlotv1.SandboxSpec) { spec.Network = opened })
	h.podNetwork(name, opened)
	h.applyNetwork(name)
	h.waitNetwork("pooled", metav1.ConditionTrue, sandlotv1.ReasonNetworkApplied, opened)
}

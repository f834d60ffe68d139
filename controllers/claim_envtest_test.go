package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestRestoreClaims: sandboxes from a Snapshot of a template with a warm
// pool claim its pool pods to restore the snapshot in place (the claim
// names the data), one pod each; the rest get pods of their own; a
// snapshot another node holds, or of another size, claims nothing there.
func TestRestoreClaims(t *testing.T) {
	h, pool, _ := pooledOnTwoNodes(t, "slot-node", "other-node", 2)
	snap := h.readySnapshot("fork-src", "slot-node", sandlotv1.RemoteNotApplicable, 512)
	h.setSnapshot("fork-src", func(st *sandlotv1.SnapshotStatus) { st.Template = "python" })
	for i := range 3 {
		h.create(newSandbox(fmt.Sprintf("child-%d", i), sandlotv1.SandboxSource{Snapshot: "fork-src"}))
	}
	claimed := map[string]string{} // pool pod → sandbox
	h.eventually(20*time.Second, "3 children placed", func() error {
		clear(claimed)
		for i := range 3 {
			s := h.sandbox(fmt.Sprintf("child-%d", i))
			switch {
			case s.Status.PodName == "":
				return errorf("%s has no pod", s.Name)
			case pool[s.Status.PodName]:
				if other, dup := claimed[s.Status.PodName]; dup {
					t.Fatalf("pool pod %s claimed by %s and %s", s.Status.PodName, other, s.Name)
				}
				claimed[s.Status.PodName] = s.Name
			}
		}
		return nil
	})
	if len(claimed) != 2 {
		t.Fatalf("claimed %v: want both of slot-node's pool pods", claimed)
	}
	for name, sbx := range claimed {
		pod := h.pod(name)
		a, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
		if err != nil || pod.Spec.NodeName != "slot-node" || a.Claim == nil || a.Claim.Restore == nil ||
			a.Claim.Restore.UID != string(snap.UID) || a.Claim.Sandbox != sbx {
			t.Fatalf("pool pod %s on %s claimed by %s: annotations %v (%v)", name, pod.Spec.NodeName, sbx, pod.Annotations, err)
		}
		if got := sandlotv1.PodSource(pod.Annotations); got == nil || got.UID != string(snap.UID) {
			t.Fatalf("pool pod %s restores %+v, want the snapshot", name, got)
		}
	}
	// The one left over restores in a pod of its own on the data's node.
	for i := range 3 {
		s := h.sandbox(fmt.Sprintf("child-%d", i))
		if !pool[s.Status.PodName] && (s.Status.PodName != s.Name || s.Status.NodeName != "slot-node") {
			t.Fatalf("%s: pod %s on %s", s.Name, s.Status.PodName, s.Status.NodeName)
		}
	}
	// other-node's pool pods stay: the data is local to slot-node.
	if n := h.unclaimedPoolOn("python", "other-node"); n != 2 {
		t.Fatalf("%d unclaimed pool pods left on other-node, want 2", n)
	}
}

// TestResumeClaimsPoolPod: a paused sandbox resumes into a pool pod of its
// template on the package's node; the package is released only once the
// node agent carried the claim out (the pod runs before its VM restored).
func TestResumeClaimsPoolPod(t *testing.T) {
	h := withController(t, "resume-node", 512)
	before := h.running(newSandbox("nap", sandlotv1.SandboxSource{Template: "python"}), "10.88.3.1")
	h.pause("nap")
	h.finishPause("nap")
	h.gone(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nap"}})
	h.waitPhase("nap", sandlotv1.SandboxPaused)
	h.editTemplate("python", func(spec *sandlotv1.TemplateSpec) { spec.WarmPool = 1 })
	pool := h.runPool("python", 1)
	h.waitPoolReady("python", "resume-node", 1) // the controller's cache holds it running
	pkg := &sandlotv1.PausedSandbox{}
	if err := h.c.Get(context.Background(), h.key("nap"), pkg); err != nil {
		t.Fatal(err)
	}

	h.editSpec("nap", func(spec *sandlotv1.SandboxSpec) { spec.Paused = false })
	var podName string
	h.eventually(20*time.Second, "resume claims the pool pod", func() error {
		podName = h.sandbox("nap").Status.PodName
		if !pool[podName] {
			return errorf("pod %q", podName)
		}
		return nil
	})
	pod := h.pod(podName)
	if src := sandlotv1.PodSource(pod.Annotations); src == nil || src.Kind != sandlotv1.RestoreKindPausedSandbox || src.UID != string(pkg.UID) {
		t.Fatalf("claimed pool pod restores %+v, want the package %s", src, pkg.UID)
	}
	h.consistently(time.Second, "the package kept until the claim is carried out", func() error {
		return h.c.Get(context.Background(), h.key("nap"), &sandlotv1.PausedSandbox{})
	})
	patch := client.MergeFrom(pod.DeepCopy()) // play the node agent
	pod.Annotations[sandlotv1.AnnotationClaimActivated] = pod.Annotations[sandlotv1.AnnotationClaim]
	if err := h.c.Patch(context.Background(), pod, patch); err != nil {
		t.Fatal(err)
	}
	h.gone(&sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: "nap"}})
	after := h.waitPhase("nap", sandlotv1.SandboxRunning)
	if after.Status.SandboxID != before.Status.SandboxID || after.Status.PodName != podName {
		t.Fatalf("resumed status = %+v", after.Status)
	}
}

// unclaimedPoolOn counts a template's unclaimed pool pods on node.
func (h *harness) unclaimedPoolOn(tpl, node string) int {
	h.t.Helper()
	pods := &corev1.PodList{}
	if err := h.c.List(context.Background(), pods, client.InNamespace(h.ns),
		client.MatchingLabels{sandlotv1.LabelPool: tpl, sandlotv1.LabelSandbox: "", sandlotv1.LabelNode: node}); err != nil {
		h.t.Fatal(err)
	}
	return len(pods.Items)
}

// TestClaimsAvoidFailedNodesAndSurviveLostPods: a pool pod (a warm one, or
// a start slot) on a node that is not Ready is never claimed (its node
// failed: the claim would never be carried out); a claimed pool pod
// deleted before the node agent carried the claim out sends its sandbox
// back to placement, not to Failed.
func TestClaimsAvoidFailedNodesAndSurviveLostPods(t *testing.T) {
	for _, kind := range []string{"warm", "slots"} {
		t.Run(kind, func(t *testing.T) { claimsAvoidFailedNodes(t, kind) })
	}
}

func claimsAvoidFailedNodes(t *testing.T, kind string) {
	h, _, stop := pooledOnTwoNodesOf(t, "live-node", "dead-node", 1, kind)
	h.setNodeReady("dead-node", false)
	h.waitPoolNodes("python", "live-node")

	s := h.createAndPlace("orphan-a")
	if s.Status.NodeName != "live-node" {
		t.Fatalf("placed on %s, want live-node", s.Status.NodeName)
	}
	first := s.Status.PodName
	if h.pod(first).Labels[sandlotv1.LabelPool] == "" {
		t.Fatalf("pod %s is no pool pod: live-node's pool pod was not claimed", first)
	}
	if n := h.unclaimedPoolOn("python", "dead-node"); n != 1 {
		t.Fatalf("%d unclaimed pool pods on dead-node, want its 1 left alone", n)
	}
	if err := h.c.Delete(context.Background(), h.pod(first)); err != nil {
		t.Fatal(err)
	}
	h.placedAgain("orphan-a", first)

	// Gone before the controller saw it terminate (deleted while the
	// controller was down; pod GC or a force delete between two reconciles
	// likewise): still a claim never carried out, not a lost sandbox.
	h.runPool("python", 2) // live-node's pool refilled beside dead-node's
	s = h.createAndPlace("orphan-b")
	second := s.Status.PodName
	if h.pod(second).Labels[sandlotv1.LabelPool] == "" {
		t.Fatalf("pod %s is no pool pod", second)
	}
	stop()
	if err := h.c.Delete(context.Background(), h.pod(second), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	h.gone(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: second}})
	startController(t)
	h.placedAgain("orphan-b", second)
}

// placedAgain waits until sandbox name runs in a pod other than first on
// live-node, failing at once if it went Failed instead.
func (h *harness) placedAgain(name, first string) {
	h.t.Helper()
	t := h.t
	h.eventually(20*time.Second, name+" placed again in another pod", func() error {
		got := h.sandbox(name)
		switch {
		case got.Status.Phase == sandlotv1.SandboxFailed:
			t.Fatalf("the sandbox failed: %s: %s", got.Status.Reason, got.Status.Message)
		case got.Status.PodName == first || got.Status.PodName == "" || got.Status.NodeName != "live-node":
			return errorf("pod %q on %q (%s: %s)", got.Status.PodName, got.Status.NodeName, got.Status.Reason, got.Status.Message)
		}
		return nil
	})
}

// createAndPlace creates a python sandbox and returns it once it has a pod.
func (h *harness) createAndPlace(name string) *sandlotv1.Sandbox {
	h.t.Helper()
	h.create(newSandbox(name, sandlotv1.SandboxSource{Template: "python"}))
	var s *sandlotv1.Sandbox
	h.eventually(10*time.Second, name+" placed", func() error {
		s = h.sandbox(name)
		if s.Status.PodName == "" {
			return errorf("no pod yet (%s)", s.Status.Message)
		}
		return nil
	})
	return s
}

// setNodeReady sets a node's Ready condition, as its kubelet (or the node
// lifecycle controller, for a dead one) would.
func (h *harness) setNodeReady(name string, ready bool) {
	h.t.Helper()
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	h.eventually(5*time.Second, "node "+name+" Ready "+string(status), func() error {
		n := &corev1.Node{}
		if err := h.c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test", LastHeartbeatTime: metav1.Now()}}
		return h.c.Status().Update(context.Background(), n)
	})
}

// waitPoolNodes waits until the template's status lists pools on exactly
// want nodes: the controllers share one node cache, so the Template
// controller dropping a node means the Sandbox controller sees it too.
func (h *harness) waitPoolNodes(tpl string, want ...string) {
	h.t.Helper()
	h.eventually(10*time.Second, "pools of "+tpl+" on "+fmt.Sprint(want), func() error {
		got := &sandlotv1.Template{}
		if err := h.c.Get(context.Background(), h.key(tpl), got); err != nil {
			return err
		}
		var nodes []string
		for _, p := range got.Status.Pool {
			nodes = append(nodes, p.Node)
		}
		if fmt.Sprint(nodes) != fmt.Sprint(want) {
			return errorf("pools on %v", nodes)
		}
		return nil
	})
}

// waitPoolReady waits until the template's status counts ready pool pods
// on node: the Sandbox controller, sharing the Template controller's
// cache, then sees them running too.
func (h *harness) waitPoolReady(tpl, node string, ready int32) {
	h.t.Helper()
	h.eventually(20*time.Second, fmt.Sprintf("%d ready pool pods of %s on %s", ready, tpl, node), func() error {
		got := &sandlotv1.Template{}
		if err := h.c.Get(context.Background(), h.key(tpl), got); err != nil {
			return err
		}
		for _, p := range got.Status.Pool {
			if p.Node == node && p.Ready == ready {
				return nil
			}
		}
		return errorf("pools %+v", got.Status.Pool)
	})
}

// pooledOnTwoNodes starts the controller with two nodes, the python
// template's base on both and a warm pool of perNode running on each;
// it returns the pool pods' names.
func pooledOnTwoNodes(t *testing.T, a, b string, perNode int) (*harness, map[string]bool, func()) {
	t.Helper()
	return pooledOnTwoNodesOf(t, a, b, perNode, "warm")
}

// pooledOnTwoNodesOf is pooledOnTwoNodes with pool pods of kind: "warm"
// (spec.warmPool) or "slots" (spec.slots).
func pooledOnTwoNodesOf(t *testing.T, a, b string, perNode int, kind string) (*harness, map[string]bool, func()) {
	t.Helper()
	h := newHarness(t)
	h.runKubelet()
	stop := startController(t)
	h.addNode(a, "16", "32Gi", nil)
	h.addNode(b, "16", "32Gi", nil)
	h.acceptedTemplate("python", 512)
	h.basesOn("python", a, b)
	h.editTemplate("python", func(spec *sandlotv1.TemplateSpec) {
		if kind == "slots" {
			spec.Slots = ptr.To(int32(perNode))
		} else {
			spec.WarmPool = int32(perNode)
		}
	})
	return h, h.runPool("python", 2*perNode), stop
}

// TestClaimSealedToTheNode: a sandbox's token and env reach its claimed
// pool VM sealed to the pod's node (the agent reads no Secret; anyone who
// may get pods reads the claim): the claim opens with that node's key to
// the token in the sandbox's Secret and its spec.env — also for a Secret
// an older controller made without the env — and holds neither in the
// clear.
func TestClaimSealedToTheNode(t *testing.T) {
	h := withController(t, "env-node", 512)
	h.editTemplate("python", func(spec *sandlotv1.TemplateSpec) { spec.WarmPool = 2 })
	pool := h.runPool("python", 2)
	h.waitPoolReady("python", "env-node", 2)
	// As an older controller left it: the token, no env.
	h.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sandlotv1.TokenSecretName("older"),
		Labels: map[string]string{sandlotv1.LabelSandbox: "older"}}, Data: map[string][]byte{sandlotv1.TokenSecretKey: []byte("t0k3n-older")}})
	for _, name := range []string{"fresh", "older"} {
		sbx := newSandbox(name, sandlotv1.SandboxSource{Template: "python"})
		sbx.Spec.Env = []sandlotv1.EnvVar{{Name: "API_TOKEN", Value: "s3cr3t-" + name}}
		h.create(sbx)
	}
	for _, name := range []string{"fresh", "older"} {
		h.eventually(20*time.Second, name+" claims a pool pod", func() error {
			if p := h.sandbox(name).Status.PodName; !pool[p] {
				return errorf("%s in pod %q", name, p)
			}
			return nil
		})
		pod := h.pod(h.sandbox(name).Status.PodName)
		secret := &corev1.Secret{}
		if err := h.c.Get(context.Background(), h.key(sandlotv1.TokenSecretName(name)), secret); err != nil {
			t.Fatal(err)
		}
		token := string(secret.Data[sandlotv1.TokenSecretKey])
		raw := fmt.Sprint(pod.Annotations)
		if strings.Contains(raw, token) || strings.Contains(raw, "s3cr3t") {
			t.Errorf("%s: pod %s's annotations hold the token or env in the clear: %s", name, pod.Name, raw)
		}
		a, err := sandlotv1.DecodeVMAnnotations(pod.Annotations)
		if err != nil || a.Claim == nil || a.Claim.Env != nil {
			t.Fatalf("%s: pod %s's claim %+v (%v): want one with no env in the clear", name, pod.Name, a.Claim, err)
		}
		id, err := nodeKey.OpenIdentity(sealed.Context(pod.Namespace, pod.Name, name), a.Claim.Sealed)
		if err != nil || id.Token != token || id.Env["API_TOKEN"] != "s3cr3t-"+name {
			t.Errorf("%s: the sealed claim opens to %+v (%v): want the Secret's token and the sandbox's env", name, id, err)
		}
	}
}

package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestSandboxFromTemplateBecomesPod: the Pod carries the runtime class,
// node, resources, env (token from the Secret), annotations and owner;
// a running pod with an IP makes the Sandbox Running.
// Longer than 60 lines: one scenario, read in order.
func TestSandboxFromTemplateBecomesPod(t *testing.T) {
	h := newHarness(t)
	startController(t)
	h.addNode("tpl-node", "8", "16Gi", nil)
	h.template("python", 1024)
	sbx := newSandbox("hello", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.Env = []sandlotv1.EnvVar{{Name: "SHARED", Value: "sandbox"}}
	h.create(sbx)

	s := h.waitPhase("hello", sandlotv1.SandboxStarting)
	pod := h.pod("hello")
	if got := ptr.Deref(pod.Spec.RuntimeClassName, ""); got != "sandlot" {
		t.Errorf("runtimeClassName = %q", got)
	}
	if pod.Spec.NodeName != "tpl-node" || s.Status.NodeName != "tpl-node" {
		t.Errorf("node: pod %q, status %q", pod.Spec.NodeName, s.Status.NodeName)
	}
	if !metav1.IsControlledBy(pod, s) {
		t.Errorf("pod owners = %v", pod.OwnerReferences)
	}
	c := pod.Spec.Containers[0]
	if c.Image != "docker.io/library/python:3.12" {
		t.Errorf("image = %q", c.Image)
	}
	wantCPU, wantMem := resource.MustParse("1"), resource.MustParse("1Gi")
	if !c.Resources.Requests.Cpu().Equal(wantCPU) || !c.Resources.Limits.Memory().Equal(wantMem) || !c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("resources = %v", c.Resources)
	}
	if pod.Spec.Overhead.Memory().IsZero() {
		t.Errorf("RuntimeClass overhead not applied: %v", pod.Spec.Overhead)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["SHARED"].Value != "sandbox" || env["FROM_TEMPLATE"].Value != "t" || env[sandlotv1.EnvSandboxID].Value != s.Status.SandboxID {
		t.Errorf("env = %v", c.Env)
	}
	ref := env[sandlotv1.EnvAccessToken].ValueFrom
	if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != sandlotv1.TokenSecretName("hello") {
		t.Fatalf("token env = %+v", env[sandlotv1.EnvAccessToken])
	}
	secret := &corev1.Secret{}
	if err := h.c.Get(context.Background(), h.key(ref.SecretKeyRef.Name), secret); err != nil {
		t.Fatal(err)
	}
	if len(secret.Data[ref.SecretKeyRef.Key]) != 64 || !metav1.IsControlledBy(secret, s) {
		t.Errorf("token secret = %v owners %v", secret.Data, secret.OwnerReferences)
	}
	base := s.Status.BaseSnapshot // a template's sandbox restores its base snapshot, never boots cold
	if !strings.HasPrefix(base, "python-base-") {
		t.Errorf("base snapshot %q", base)
	}
	for k, want := range map[string]string{
		sandlotv1.AnnotationSandboxID: s.Status.SandboxID, sandlotv1.AnnotationBoot: sandlotv1.BootRestore,
		sandlotv1.AnnotationRestoreKind: "Snapshot", sandlotv1.AnnotationRestoreName: base,
		sandlotv1.AnnotationVCPU: "1", sandlotv1.AnnotationMemoryMiB: "1024", sandlotv1.AnnotationWritableLayerMiB: "1024",
	} {
		if got := pod.Annotations[k]; got != want {
			t.Errorf("annotation %s = %q, want %q", k, got, want)
		}
	}
	if len(s.Status.SandboxID) != 20 || s.Status.Source != "template/python" || s.Status.ExpiresAt == nil {
		t.Errorf("status = %+v", s.Status)
	}

	h.setPod("hello", corev1.PodRunning, "10.88.0.7")
	s = h.waitPhase("hello", sandlotv1.SandboxRunning)
	if s.Status.PodIP != "10.88.0.7" || s.Status.StartedAt == nil || condition(s.Status.Conditions, sandlotv1.ConditionReady).Status != metav1.ConditionTrue {
		t.Errorf("running status = %+v", s.Status)
	}
}

// TestPodFailureFailsSandbox: the pod's reason reaches the Sandbox, and
// nothing is started again.
func TestPodFailureFailsSandbox(t *testing.T) {
	h := withController(t, "fail-node", 512)
	h.running(newSandbox("doomed", sandlotv1.SandboxSource{Template: "python"}), "10.88.0.8")
	h.setPod("doomed", corev1.PodFailed, "10.88.0.8", func(st *corev1.PodStatus) {
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: "sandbox", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, Message: "guest out of memory"}}}}
	})
	s := h.waitPhase("doomed", sandlotv1.SandboxFailed)
	if s.Status.Reason != "OOMKilled" || condition(s.Status.Conditions, sandlotv1.ConditionReady).Reason != sandlotv1.ReasonPodFailed {
		t.Fatalf("failed status = %+v", s.Status)
	}
	mustContain(t, "message", s.Status.Message, "exited with code 137")

	// A terminal sandbox stays so: its failed pod is kept, nothing new made.
	h.consistently(time.Second, "no restart", func() error {
		if p := h.pod("doomed"); p.Status.Phase != corev1.PodFailed {
			t.Fatalf("pod replaced: %+v", p.Status)
		}
		return nil
	})
}

// TestExpiryDeletesSandboxAndPod: past its timeout a sandbox goes, and so
// do its pod and token.
func TestExpiryDeletesSandboxAndPod(t *testing.T) {
	h := withController(t, "expiry-node", 512)
	sbx := newSandbox("brief", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.TimeoutSeconds = ptr.To[int32](3)
	s := h.running(sbx, "10.88.0.9")
	if got := s.Status.ExpiresAt.Sub(s.CreationTimestamp.Time); got != 3*time.Second {
		t.Fatalf("expiresAt - creation = %v, want 3s", got)
	}
	h.gone(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "brief"}})
	h.gone(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "brief"}})
	h.gone(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sandlotv1.TokenSecretName("brief")}})
	if since := time.Since(s.Status.ExpiresAt.Time); since < 0 {
		t.Fatalf("deleted %v before expiry", -since)
	}
}

// TestExtendTimeout: raising timeoutSeconds moves expiresAt and keeps the
// sandbox alive past the original deadline.
func TestExtendTimeout(t *testing.T) {
	h := withController(t, "extend-node", 512)
	sbx := newSandbox("longer", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.TimeoutSeconds = ptr.To[int32](2)
	h.create(sbx)
	h.waitPhase("longer", sandlotv1.SandboxStarting)
	s := h.editSpec("longer", func(spec *sandlotv1.SandboxSpec) { spec.TimeoutSeconds = ptr.To[int32](600) })
	h.consistently(3*time.Second, "still there after the first deadline", func() error {
		h.sandbox("longer")
		return nil
	})
	if got := h.sandbox("longer").Status.ExpiresAt.Sub(s.CreationTimestamp.Time); got != 600*time.Second {
		t.Fatalf("expiresAt - creation = %v", got)
	}
}

// TestNoEligibleNodePending: without a node a template has no base
// snapshot and its sandbox waits, saying why; when a node appears the base
// is built there and the sandbox placed on it.
func TestNoEligibleNodePending(t *testing.T) {
	h := newHarness(t)
	startController(t)
	h.acceptedTemplate("python", 512)
	h.create(newSandbox("waiting", sandlotv1.SandboxSource{Template: "python"}))
	h.eventually(10*time.Second, "waiting for the base snapshot", func() error {
		s := h.sandbox("waiting")
		if s.Status.Phase != sandlotv1.SandboxPending || s.Status.Reason != sandlotv1.ReasonBaseSnapshotNotReady {
			return errorf("phase %s, reason %s", s.Status.Phase, s.Status.Reason)
		}
		return nil
	})
	mustContain(t, "message", h.sandbox("waiting").Status.Message, "no Ready, schedulable node labelled sandlot.dev/runtime=true")

	h.addNode("late-node", "8", "16Gi", nil)
	h.buildBases("python")
	if s := h.waitPhase("waiting", sandlotv1.SandboxStarting); s.Status.NodeName != "late-node" {
		t.Fatalf("placed on %q", s.Status.NodeName)
	}
}

// TestSandboxNeedsItsTemplate: a missing template keeps the sandbox Pending
// with a reason; creating the template starts it.
func TestSandboxNeedsItsTemplate(t *testing.T) {
	h := newHarness(t)
	startController(t)
	h.addNode("tplwait-node", "8", "16Gi", nil)
	h.create(newSandbox("early", sandlotv1.SandboxSource{Template: "later"}))
	h.eventually(10*time.Second, "SourceNotFound", func() error {
		if s := h.sandbox("early"); s.Status.Reason != sandlotv1.ReasonSourceNotFound {
			return errorf("status %+v", s.Status)
		}
		return nil
	})
	h.template("later", 512)
	h.waitPhase("early", sandlotv1.SandboxStarting)
}

// TestDeletingSandboxDeletesPodAndSecret.
func TestDeletingSandboxDeletesPodAndSecret(t *testing.T) {
	h := withController(t, "del-node", 512)
	s := h.running(newSandbox("bye", sandlotv1.SandboxSource{Template: "python"}), "10.88.0.10")
	if err := h.c.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.gone(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bye"}})
	h.gone(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sandlotv1.TokenSecretName("bye")}})
	h.gone(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "bye"}})
}

// TestDeletingPausedSandboxDeletesItsPackage: the finalizer takes the
// pause package with it (it reads the package from its cache).
func TestDeletingPausedSandboxDeletesItsPackage(t *testing.T) {
	h := withController(t, "delpaused-node", 512)
	s := h.running(newSandbox("napgone", sandlotv1.SandboxSource{Template: "python"}), "10.88.0.11")
	pkg := h.pause("napgone")
	h.finishPause("napgone")
	h.waitPhase("napgone", sandlotv1.SandboxPaused)
	if err := h.c.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.gone(&sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: "napgone", UID: pkg.UID}})
	h.gone(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "napgone", UID: s.UID}})
}

// TestDeletingSandboxSparesOthersObjects: a user's Secret and pause
// package bearing a sandbox's derived names — labelled as sandlot's, so
// the controller's cache holds them — are not the sandbox's: deleting the
// sandbox leaves them.
func TestDeletingSandboxSparesOthersObjects(t *testing.T) {
	h := withController(t, "squat-node", 512)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sandlotv1.TokenSecretName("squat"),
		Labels: map[string]string{sandlotv1.LabelSandbox: "squat"}}, StringData: map[string]string{sandlotv1.TokenSecretKey: "mine"}}
	h.create(secret)
	pkg := &sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: "squat"},
		Spec: sandlotv1.PausedSandboxSpec{SandboxID: "aaaaaaaaaaaaaaaaaaaa", NodeName: "squat-node", PodName: "squat"}}
	h.create(pkg)
	s := newSandbox("squat", sandlotv1.SandboxSource{Template: "python"})
	h.create(s)
	h.eventually(10*time.Second, "the controller's finalizer on the sandbox", func() error {
		if got := h.sandbox("squat"); !controllerutil.ContainsFinalizer(got, sandlotv1.FinalizerSandboxVM) {
			return errorf("finalizers %v", got.Finalizers)
		}
		return nil
	})
	if err := h.c.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.gone(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "squat", UID: s.UID}})
	left := &corev1.Secret{}
	if err := h.c.Get(context.Background(), h.key(secret.Name), left); err != nil || left.UID != secret.UID || left.DeletionTimestamp != nil {
		t.Fatalf("the user's secret after the sandbox went: %v, %+v", err, left.ObjectMeta)
	}
	kept := &sandlotv1.PausedSandbox{}
	if err := h.c.Get(context.Background(), h.key(pkg.Name), kept); err != nil || kept.UID != pkg.UID || kept.DeletionTimestamp != nil {
		t.Fatalf("the user's pause package after the sandbox went: %v, %+v", err, kept.ObjectMeta)
	}
}

// TestKubeletRejectionPlacesAgain: a pod the kubelet refused at admission
// (its VM never ran) is replaced, not a terminal failure.
func TestKubeletRejectionPlacesAgain(t *testing.T) {
	h := withController(t, "reject-node", 512)
	h.create(newSandbox("bounced", sandlotv1.SandboxSource{Template: "python"}))
	h.waitPhase("bounced", sandlotv1.SandboxStarting)
	first := h.pod("bounced").UID
	h.setPod("bounced", corev1.PodFailed, "", func(st *corev1.PodStatus) {
		st.Reason, st.Message = "OutOfcpu", "Node didn't have enough resource: cpu"
	})
	h.eventually(15*time.Second, "a new pod", func() error {
		pod := &corev1.Pod{}
		if err := h.c.Get(context.Background(), h.key("bounced"), pod); err != nil {
			return err
		}
		if pod.UID == first {
			return errorf("still the rejected pod (%s)", pod.Status.Phase)
		}
		return nil
	})
	h.setPod("bounced", corev1.PodRunning, "10.88.5.1")
	if s := h.waitPhase("bounced", sandlotv1.SandboxRunning); s.Status.PodIP != "10.88.5.1" {
		t.Fatalf("status %+v", s.Status)
	}
}

// TestWarmPoolClaims: a template's warm pool fills (pods restoring the
// base, paused by the shim), 20 sandboxes created at once against a pool
// of 5 claim each pool pod at most once — the others get pods of their
// own — and the pool refills.
func TestWarmPoolClaims(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("pool-node", "64", "64Gi", nil) // room for 25 VMs at a core each
	h.template("python", 512)
	h.editTemplate("python", func(spec *sandlotv1.TemplateSpec) { spec.WarmPool = 5 })
	pool := h.runPool("python", 5)
	for i := range 20 {
		h.create(newSandbox(fmt.Sprintf("claim-%d", i), sandlotv1.SandboxSource{Template: "python"}))
	}
	owners := map[string]string{} // pool pod → sandbox
	h.eventually(30*time.Second, "20 sandboxes with pods", func() error {
		clear(owners)
		got := 0
		for i := range 20 {
			s := h.sandbox(fmt.Sprintf("claim-%d", i))
			if s.Status.PodName == "" {
				continue
			}
			got++
			if pool[s.Status.PodName] {
				if other, dup := owners[s.Status.PodName]; dup {
					t.Fatalf("pool pod %s claimed by %s and %s", s.Status.PodName, other, s.Name)
				}
				owners[s.Status.PodName] = s.Name
			}
		}
		if got != 20 {
			return errorf("%d of 20 sandboxes have a pod", got)
		}
		return nil
	})
	if len(owners) != 5 {
		t.Fatalf("%d of the 5 pool pods claimed: %v", len(owners), owners)
	}
	for name, sbx := range owners {
		pod := h.pod(name)
		if !metav1.IsControlledBy(pod, h.sandbox(sbx)) || pod.Labels[sandlotv1.LabelSandbox] != sbx || pod.Annotations[sandlotv1.AnnotationClaim] == "" {
			t.Fatalf("claimed pod %s: owners %v labels %v", name, pod.OwnerReferences, pod.Labels)
		}
	}
	// Refills wait behind the claims the node agent has not activated.
	if n := h.unclaimedPool("python"); n > 2 {
		t.Fatalf("%d pool pods refilled while 5 claims were being activated", n)
	}
	for name := range owners {
		h.activateClaim(name)
	}
	h.runPool("python", 5) // refilled
}

// unclaimedPool counts a template's unclaimed pool pods.
func (h *harness) unclaimedPool(tpl string) int {
	h.t.Helper()
	pods := &corev1.PodList{}
	if err := h.c.List(context.Background(), pods, client.InNamespace(h.ns),
		client.MatchingLabels{sandlotv1.LabelPool: tpl, sandlotv1.LabelSandbox: ""}); err != nil {
		h.t.Fatal(err)
	}
	return len(pods.Items)
}

package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestTokenSecretDeletionHeld: a running sandbox's token Secret is held
// (one an older controller made without the finalizer too), so `kubectl
// delete secret <sbx>-envd-token` under it is held — the Secret stays,
// Terminating, with the token the VM booted with (a new one would open
// nothing), and the sandbox gets one Event saying so, not one per
// reconcile. Deleting the Sandbox then takes the Secret away for good.
func TestTokenSecretDeletionHeld(t *testing.T) {
	h := withController(t, "held-node", 512)
	s := h.running(newSandbox("held", sandlotv1.SandboxSource{Template: "python"}), "10.88.3.1")
	before := h.tokenSecret("held")
	if !controllerutil.ContainsFinalizer(before, sandlotv1.FinalizerTokenInUse) {
		t.Fatalf("token Secret finalizers %v, want %s from its creation", before.Finalizers, sandlotv1.FinalizerTokenInUse)
	}
	// As an older controller made it, without the finalizer: held too.
	h.dropFinalizer(before, sandlotv1.FinalizerTokenInUse)
	h.eventually(10*time.Second, "the finalizer on an older token Secret", func() error {
		if before = h.tokenSecret("held"); !controllerutil.ContainsFinalizer(before, sandlotv1.FinalizerTokenInUse) {
			return errorf("finalizers %v", before.Finalizers)
		}
		return nil
	})
	if err := h.c.Delete(context.Background(), before); err != nil {
		t.Fatal(err)
	}
	h.eventually(10*time.Second, "an Event on the sandbox: the deletion is held", func() error {
		return h.hasEvent(s.UID, sandlotv1.ReasonTokenSecretDeletionHeld)
	})
	// Reconciles go on (the kubelet stand-in writes the pod again): the
	// Secret and its token stay, and the Event is not repeated.
	h.setPod("held", corev1.PodRunning, "10.88.3.1")
	h.consistently(2*time.Second, "the held Secret's token, one Event", func() error {
		got := h.tokenSecret("held")
		if got.UID != before.UID || got.DeletionTimestamp == nil ||
			string(got.Data[sandlotv1.TokenSecretKey]) != string(before.Data[sandlotv1.TokenSecretKey]) {
			return errorf("token Secret %s (deleting %v), token changed %v", got.UID, got.DeletionTimestamp,
				string(got.Data[sandlotv1.TokenSecretKey]) != string(before.Data[sandlotv1.TokenSecretKey]))
		}
		if n, err := h.countEvents(s.UID, sandlotv1.ReasonTokenSecretDeletionHeld); err != nil || n != 1 {
			return errorf("%d %s Events (%v), want 1", n, sandlotv1.ReasonTokenSecretDeletionHeld, err)
		}
		return nil
	})
	if c := condition(h.sandbox("held").Status.Conditions, sandlotv1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready %s %s while the token is held: want True", c.Status, c.Reason)
	}
	if err := h.c.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.gone(before.DeepCopy())
	h.gone(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "held", UID: s.UID}})
}

// TestTokenSecretLostUnderRunningVM: a token Secret really gone (its
// finalizer removed by hand, then deleted) while the VM runs is not drawn
// again under it: Ready says why and the phase stays. The next pod, after
// a pause, boots with a new token, held like the first; deleting the
// Sandbox leaves no Secret behind.
func TestTokenSecretLostUnderRunningVM(t *testing.T) {
	h := withController(t, "lost-node", 512)
	const name = "tokenless"
	s := h.running(newSandbox(name, sandlotv1.SandboxSource{Template: "python"}), "10.88.3.2")
	old := h.tokenSecret(name)
	if err := h.c.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	h.dropFinalizer(old, sandlotv1.FinalizerTokenInUse)
	h.gone(old.DeepCopy())
	h.eventually(10*time.Second, "Ready=False "+sandlotv1.ReasonTokenSecretLost, func() error {
		got := h.sandbox(name)
		c := condition(got.Status.Conditions, sandlotv1.ConditionReady)
		if c.Status != metav1.ConditionFalse || c.Reason != sandlotv1.ReasonTokenSecretLost || got.Status.Phase != sandlotv1.SandboxRunning {
			return errorf("phase %s, Ready %s %s: %s", got.Status.Phase, c.Status, c.Reason, c.Message)
		}
		return nil
	})
	mustContain(t, "Ready's message", condition(h.sandbox(name).Status.Conditions, sandlotv1.ConditionReady).Message, "keeps the token it booted with")
	h.setPod(name, corev1.PodRunning, "10.88.3.2") // one more reconcile of the running pod
	h.consistently(2*time.Second, "no token drawn while the pod runs", func() error {
		err := h.c.Get(context.Background(), h.key(sandlotv1.TokenSecretName(name)), &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			return errorf("token Secret: %v, want none", err)
		}
		return nil
	})
	if err := h.hasEvent(s.UID, sandlotv1.ReasonTokenSecretLost); err != nil {
		t.Error(err)
	}

	// The way out: a pause. Its package holds the VM; the pod goes, and
	// the token the resumed pod boots with is drawn.
	h.pause(name)
	h.finishPause(name)
	h.waitPhase(name, sandlotv1.SandboxPaused)
	var fresh *corev1.Secret
	h.eventually(10*time.Second, "a new token for the next pod", func() error {
		fresh = &corev1.Secret{}
		return h.c.Get(context.Background(), h.key(sandlotv1.TokenSecretName(name)), fresh)
	})
	if string(fresh.Data[sandlotv1.TokenSecretKey]) == string(old.Data[sandlotv1.TokenSecretKey]) ||
		!controllerutil.ContainsFinalizer(fresh, sandlotv1.FinalizerTokenInUse) || !metav1.IsControlledBy(fresh, s) {
		t.Fatalf("the new token Secret %+v: want a new token, held and owned by the sandbox", fresh.ObjectMeta)
	}
	if c := condition(h.sandbox(name).Status.Conditions, sandlotv1.ConditionReady); c.Reason != sandlotv1.ReasonPaused {
		t.Errorf("Ready of the paused sandbox %s %s, want %s", c.Status, c.Reason, sandlotv1.ReasonPaused)
	}
	if err := h.c.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.gone(fresh.DeepCopy())
	h.gone(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, UID: s.UID}})
}

// TestTokenSecretOfForceRemovedSandbox: a Sandbox whose finalizer was
// removed by hand goes without its finalize; the deletion of its held
// token Secret (the garbage collector's; here the test's) is let go by
// the controller rather than held forever.
func TestTokenSecretOfForceRemovedSandbox(t *testing.T) {
	h := newHarness(t)
	stop := startController(t)
	s := newSandbox("forced", sandlotv1.SandboxSource{Template: "absent"}) // Pending: its token is made all the same
	h.create(s)
	var secret *corev1.Secret
	h.eventually(10*time.Second, "the held token Secret", func() error {
		secret = &corev1.Secret{}
		if err := h.c.Get(context.Background(), h.key(sandlotv1.TokenSecretName("forced")), secret); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(secret, sandlotv1.FinalizerTokenInUse) {
			return errorf("finalizers %v", secret.Finalizers)
		}
		return nil
	})
	h.eventually(10*time.Second, "the sandbox's finalizer", func() error {
		if got := h.sandbox("forced"); !controllerutil.ContainsFinalizer(got, sandlotv1.FinalizerSandboxVM) {
			return errorf("finalizers %v", got.Finalizers)
		}
		return nil
	})
	stop()
	if err := h.c.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	h.dropFinalizer(s, sandlotv1.FinalizerSandboxVM)
	h.gone(s.DeepCopy())
	if err := h.c.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	startController(t)
	h.gone(secret.DeepCopy())
}

// tokenSecret is a sandbox's token Secret.
func (h *harness) tokenSecret(sandbox string) *corev1.Secret {
	h.t.Helper()
	s := &corev1.Secret{}
	if err := h.c.Get(context.Background(), h.key(sandlotv1.TokenSecretName(sandbox)), s); err != nil {
		h.t.Fatalf("token Secret of %s: %v", sandbox, err)
	}
	return s
}

// dropFinalizer removes finalizer f from obj by hand, as `kubectl edit`
// would (a merge patch of the copy read just before).
func (h *harness) dropFinalizer(obj client.Object, f string) {
	h.t.Helper()
	h.eventually(5*time.Second, "finalizer "+f+" removed from "+obj.GetName(), func() error {
		if err := h.c.Get(context.Background(), h.key(obj.GetName()), obj); err != nil {
			return err
		}
		orig := obj.DeepCopyObject().(client.Object)
		if !controllerutil.RemoveFinalizer(obj, f) {
			return nil
		}
		return h.c.Patch(context.Background(), obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
}

// countEvents counts the Events with reason about the object of that UID.
func (h *harness) countEvents(uid types.UID, reason string) (int, error) {
	list := &eventsv1.EventList{}
	if err := h.c.List(context.Background(), list, client.InNamespace(h.ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range list.Items {
		if e.Regarding.UID == uid && e.Reason == reason {
			n++
		}
	}
	return n, nil
}

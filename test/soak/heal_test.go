package soak

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// healTemplate is TestHeal's own template: a warm pool of one per node.
const healTemplate = "heal"

// TestHeal deletes, by hand, each object another one refers to — a
// Template's base, a Snapshot's base, a PausedSandbox (a paused
// sandbox's package), a warm pool pod, a Sandbox's token Secret — on the
// chart-installed cluster: the referrer holds it, rebuilds it, or says
// what happened; nothing stalls silently.
func TestHeal(t *testing.T) {
	k := sbxtest.Client(t, c)
	ctx := context.Background()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: healTemplate, Namespace: ns},
		Spec: sandlotv1.TemplateSpec{Image: sbxtest.DefaultImage(t), Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256},
			WarmPool: 1, Slots: ptr.To[int32](0)}}
	if err := k.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), tpl) })
	if err := sbxtest.WaitBases(ctx, k, client.ObjectKeyFromObject(tpl), len(c.Nodes), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			explain(t)
		}
	})
	t.Run("template base deleted: rebuilt", func(t *testing.T) { healTemplateBase(t, k) })
	t.Run("snapshot's base deleted: held", func(t *testing.T) { healSnapshotBase(t, k) })
	t.Run("paused sandbox's package deleted: reported", func(t *testing.T) { healPackage(t, k) })
	t.Run("warm pool pod deleted: refilled", func(t *testing.T) { healPoolPod(t, k) })
	t.Run("token Secret deleted: held", func(t *testing.T) { healToken(t, k) })
}

// baseOn is the template's current base on node: its Snapshot's name.
func baseOn(t *testing.T, k client.Client, node string) string {
	t.Helper()
	var tpl sandlotv1.Template
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: healTemplate}, &tpl); err != nil {
		t.Fatal(err)
	}
	for _, b := range tpl.Status.BaseSnapshots {
		if b.Node == node && b.Revision == tpl.Status.BaseRevision && b.Phase == sandlotv1.BaseReady {
			return b.Snapshot
		}
	}
	t.Fatalf("template %s has no Ready base on %s: %+v", healTemplate, node, tpl.Status.BaseSnapshots)
	return ""
}

// deleteByHand deletes o as `kubectl delete --wait=false` does.
func deleteByHand(t *testing.T, k client.Client, o client.Object) {
	t.Helper()
	if err := k.Delete(context.Background(), o); err != nil {
		t.Fatalf("delete %s by hand: %v", o.GetName(), err)
	}
}

func healTemplateBase(t *testing.T, k client.Client) {
	node := c.Nodes[0].Name
	old := &sandlotv1.Snapshot{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: baseOn(t, k, node)}, old); err != nil {
		t.Fatal(err)
	}
	deleteByHand(t, k, old)
	// The status never names a base that is gone; a new one is built.
	poll.Eventually(t, 5*time.Minute, "a new base on "+node, func() error {
		var tpl sandlotv1.Template
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: healTemplate}, &tpl); err != nil {
			return err
		}
		for _, b := range tpl.Status.BaseSnapshots {
			var s sandlotv1.Snapshot
			err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: b.Snapshot}, &s)
			// Held (deleting, kept while VMs restored from it run) is
			// fine; named but gone is the stall this guards against.
			if b.Phase == sandlotv1.BaseReady && apierrors.IsNotFound(err) {
				return poll.Stop(fmt.Errorf("status names base %s Ready on %s, which is gone", b.Snapshot, b.Node))
			}
			if b.Node == node && b.Phase == sandlotv1.BaseReady && s.UID != old.UID {
				return nil
			}
		}
		return fmt.Errorf("bases %+v", tpl.Status.BaseSnapshots)
	})
	sbx := sbxtest.Create(t, k, healTemplate, "heal-after-base")["heal-after-base"]
	if out := sbxtest.EnvdRun(t, k, sbx, "echo ok"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("a new sandbox of the template answers %q", out)
	}
}

func healSnapshotBase(t *testing.T, k client.Client) {
	sbx := sbxtest.Create(t, k, healTemplate, "heal-src")["heal-src"]
	sbxtest.EnvdRun(t, k, sbx, "echo kept > /tmp/heal")
	snap := sbxtest.Snapshot(t, k, "heal-snap", "heal-src")
	base := &sandlotv1.Snapshot{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: baseOn(t, k, sbx.Status.NodeName)}, base); err != nil {
		t.Fatal(err)
	}
	deleteByHand(t, k, base)
	poll.Consistently(t, 5*time.Second, "the base held while "+snap.Name+" builds on it", func() error {
		var got sandlotv1.Snapshot
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(base), &got); err != nil {
			return fmt.Errorf("base %s: %v", base.Name, err)
		}
		if got.UID != base.UID {
			return fmt.Errorf("base %s replaced", base.Name)
		}
		return nil
	})
	restored := sbxtest.FromSnapshot(t, k, "heal-restored", snap.Name)
	if out := sbxtest.EnvdRun(t, k, restored, "cat /tmp/heal"); strings.TrimSpace(out) != "kept" {
		t.Fatalf("restored from %s: /tmp/heal holds %q", snap.Name, out)
	}
	// Once nothing builds on it, the held base goes.
	for _, name := range []string{"heal-restored", "heal-src"} {
		sbxtest.Delete(t, k, name)
	}
	deleteByHand(t, k, snap)
	gone(t, k, base)
}

// gone waits until o (by UID) no longer exists.
func gone(t *testing.T, k client.Client, o client.Object) {
	t.Helper()
	uid := o.GetUID()
	poll.Eventually(t, 3*time.Minute, o.GetName()+" gone", func() error {
		got := o.DeepCopyObject().(client.Object)
		err := k.Get(context.Background(), client.ObjectKeyFromObject(o), got)
		if apierrors.IsNotFound(err) || (err == nil && got.GetUID() != uid) {
			return nil
		}
		return fmt.Errorf("still there (finalizers %v, %v)", got.GetFinalizers(), err)
	})
}

func healPackage(t *testing.T, k client.Client) {
	sbxtest.Create(t, k, healTemplate, "heal-paused")
	pkg := sbxtest.Pause(t, k, "heal-paused")
	deleteByHand(t, k, pkg)
	poll.Eventually(t, 2*time.Minute, "heal-paused says its state was discarded", func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "heal-paused"}, &s); err != nil {
			return err
		}
		if s.Status.Phase != sandlotv1.SandboxFailed || s.Status.Reason != sandlotv1.ReasonPausedStateDiscarded {
			return fmt.Errorf("phase %s reason %q", s.Status.Phase, s.Status.Reason)
		}
		return nil
	})
	gone(t, k, pkg)
}

func healPoolPod(t *testing.T, k client.Client) {
	node := c.Nodes[1].Name
	// The pool rolls after the base rebuilds above: a Ready pod first.
	var victim corev1.Pod
	poll.Eventually(t, 3*time.Minute, "a Ready warm pool pod on "+node, func() error {
		for _, p := range poolPods(t, k, node) {
			if p.DeletionTimestamp == nil && ready(&p) {
				victim = p
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	deleteByHand(t, k, &victim)
	poll.Eventually(t, 3*time.Minute, "the warm pool on "+node+" refilled", func() error {
		for _, p := range poolPods(t, k, node) {
			if p.UID != victim.UID && p.DeletionTimestamp == nil && ready(&p) {
				return nil
			}
		}
		return fmt.Errorf("no new Ready pool pod")
	})
}

func poolPods(t *testing.T, k client.Client, node string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := k.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{sandlotv1.LabelPool: healTemplate}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out
}

func healToken(t *testing.T, k client.Client) {
	sbx := sbxtest.Create(t, k, healTemplate, "heal-token")["heal-token"]
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: ns, Name: sandlotv1.TokenSecretName(sbx.Name)}
	if err := k.Get(context.Background(), key, secret); err != nil {
		t.Fatal(err)
	}
	deleteByHand(t, k, secret)
	poll.Consistently(t, 5*time.Second, "the token Secret held", func() error {
		var got corev1.Secret
		if err := k.Get(context.Background(), key, &got); err != nil {
			return err
		}
		if got.UID != secret.UID || string(got.Data[sandlotv1.TokenSecretKey]) != string(secret.Data[sandlotv1.TokenSecretKey]) {
			return fmt.Errorf("the token Secret was replaced")
		}
		return nil
	})
	poll.Eventually(t, time.Minute, "an Event on heal-token: its Secret's deletion is held", func() error {
		var events corev1.EventList
		if err := k.List(context.Background(), &events, client.InNamespace(ns),
			client.MatchingFields{"involvedObject.uid": string(sbx.UID), "reason": sandlotv1.ReasonTokenSecretDeletionHeld}); err != nil {
			return err
		}
		if len(events.Items) == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})
	if out := sbxtest.EnvdRun(t, k, sbx, "echo ok"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("with its token held, the sandbox answers %q", out)
	}
	sbxtest.Delete(t, k, sbx.Name)
	gone(t, k, secret)
}

// explain logs what a failed heal left: the template's bases and
// conditions, the snapshots, the sandboxes, the controller's last words
// on the template.
func explain(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{
		{"get", "template", healTemplate, "-n", ns, "-o", "jsonpath={.status}"},
		{"get", "snapshots,sandboxes,pods", "-n", ns, "-o", "wide"},
		{"get", "snapshots", "-n", ns, "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase,DELETING:.metadata.deletionTimestamp,FINALIZERS:.metadata.finalizers"},
		{"logs", "-n", "sandlot-system", "deploy/sandlot-controller", "--tail", "400"},
	} {
		out, err := c.Kubectl(ctx, args...)
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			if args[0] != "logs" || strings.Contains(l, healTemplate) {
				lines = append(lines, l)
			}
		}
		t.Logf("kubectl %s (%v):\n%s", strings.Join(args, " "), err, strings.Join(lines[max(0, len(lines)-60):], "\n"))
	}
}

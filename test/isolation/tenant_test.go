package isolation

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestTenantWithEditRights: alice, with the built-in `edit` role in her
// own namespace, cannot create a pod that restores another namespace's
// Snapshot (or carries any sandlot.dev/ key); her plain pod of the runtime
// class runs, as a cold-booted and jailed VM. (The agent's own check of a
// stage request, for a pod the policy would not have let in, is tested on
// its own in nodeagent.)
func TestTenantWithEditRights(t *testing.T) {
	k := sbxtest.Client(t, c)
	isoTemplate(t, k)
	victim := sbxtest.Create(t, k, "iso", "iso-victim")["iso-victim"]
	snap := sbxtest.Snapshot(t, k, "iso-victim-snap", victim.Name)
	alice := tenant(t, k, "tenant", "alice")
	forged := plainPod("forged", "tenant", sandlotv1.RuntimeClassName, 256, "sleep", "3600")
	forged.Annotations = map[string]string{sandlotv1.AnnotationBoot: sandlotv1.BootRestore,
		sandlotv1.AnnotationRestoreKind: "Snapshot", sandlotv1.AnnotationRestoreUID: string(snap.UID),
		sandlotv1.AnnotationRestoreLocation: "/var/lib/sandlot/store/x"}
	err := alice.Create(context.Background(), forged)
	if err == nil || !strings.Contains(err.Error(), "sandlot.dev/") || !strings.Contains(err.Error(), "sandlot-pod-keys") {
		t.Fatalf("alice's pod restoring default's Snapshot: %v (want refused, naming the key and the policy)", err)
	}
	labelled := plainPod("labelled", "tenant", sandlotv1.RuntimeClassName, 256, "sleep", "3600")
	labelled.Labels = map[string]string{sandlotv1.LabelSandbox: victim.Name}
	if err := alice.Create(context.Background(), labelled); err == nil {
		t.Fatal("alice's pod with a sandlot.dev/ label was admitted")
	}
	plain := plainPod("plain", "tenant", sandlotv1.RuntimeClassName, 256, "sleep", "3600")
	if err := alice.Create(context.Background(), plain); err != nil {
		t.Fatalf("alice's plain pod of the runtime class: %v", err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), plain) })
	pod := waitPodPhase(t, k, client.ObjectKeyFromObject(plain), corev1.PodRunning)
	q := qemuOf(t, string(pod.UID))
	if q.uid == 0 {
		t.Fatalf("alice's pod's QEMU runs as root")
	}
	checkConfined(t, q, string(pod.UID), qemuOf(t, podUIDOf(t, k, victim)))
}

// tenant makes namespace ns with user bound to the built-in edit role in
// it and returns a client that impersonates the user.
func tenant(t *testing.T, k client.Client, ns, user string) client.Client {
	t.Helper()
	ctx := context.Background()
	if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-edit", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
	if err := k.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	as, err := client.New(cfg, client.Options{Scheme: k.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	// The edit role reaches alice once the aggregation controller filled it.
	poll.Eventually(t, time.Minute, user+" may list pods in "+ns, func() error {
		return as.List(ctx, &corev1.PodList{}, client.InNamespace(ns))
	})
	return as
}

func podUIDOf(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox) string {
	t.Helper()
	var pod corev1.Pod
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: sbx.Namespace, Name: sbx.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	return string(pod.UID)
}

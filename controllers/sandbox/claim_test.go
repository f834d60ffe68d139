package sandbox

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/placement"
)

func TestPoolRequestOf(t *testing.T) {
	snap := sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: "s", UID: "u", Location: "l"}
	tplSbx := &sandlotv1.Sandbox{Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "py"}}}
	snapSbx := &sandlotv1.Sandbox{Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Snapshot: "s"}}}
	for _, tc := range []struct {
		name string
		sbx  *sandlotv1.Sandbox
		src  resolvedSource
		want poolRequest
		ok   bool
	}{
		{"template start: a plain claim of the revision", tplSbx,
			resolvedSource{Template: "py", BaseRevision: "r1", PerNode: map[string]sandlotv1.RestoreRef{"n": snap}},
			poolRequest{template: "py", baseRevision: "r1"}, true},
		{"from a snapshot: a restore claim", snapSbx, resolvedSource{Template: "py", Restore: snap},
			poolRequest{template: "py", restore: &snap}, true},
		{"resume of a template's sandbox: a restore claim", tplSbx, resolvedSource{Template: "py", Restore: snap},
			poolRequest{template: "py", restore: &snap}, true},
		{"a snapshot of no template: none", snapSbx, resolvedSource{Restore: snap}, poolRequest{}, false},
		{"a builder (cold boot): none", tplSbx, resolvedSource{Template: "py"}, poolRequest{}, false},
		{"a resume by boot on the package's disk: none", tplSbx,
			resolvedSource{Template: "py", Restore: sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindPausedSandbox, UID: "p", Boot: true}},
			poolRequest{}, false},
		{"rules with secrets (the pod mounts their Secret): none",
			&sandlotv1.Sandbox{Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "py"},
				Network: &sandlotv1.SandboxNetwork{SecretName: "s"}}},
			resolvedSource{Template: "py", BaseRevision: "r1", PerNode: map[string]sandlotv1.RestoreRef{"n": snap}},
			poolRequest{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := poolRequestOf(tc.sbx, tc.src)
			if ok != tc.ok || got.template != tc.want.template || got.baseRevision != tc.want.baseRevision ||
				(got.restore == nil) != (tc.want.restore == nil) || (got.restore != nil && *got.restore != *tc.want.restore) {
				t.Fatalf("got %+v %v, want %+v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestHostsRestore(t *testing.T) {
	pool := func(node, image string, a sandlotv1.VMAnnotations) *corev1.Pod {
		a.Pool = "py"
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: encodeAnnotations(t, a)},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Image: image}}}}
	}
	size := sandlotv1.VMAnnotations{VCPU: 1, MemoryMiB: 512, WritableLayerMiB: 1024}
	src := resolvedSource{VM: sandlotv1.VMSpec{Image: "img:1", Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 512}, WritableLayerMiB: 1024},
		Data: placement.DataSource{Nodes: []string{"a"}}}
	remote := src
	remote.Data.Remote, remote.Data.Fingerprint = true, "fp1"
	bigger := size
	bigger.MemoryMiB = 1024
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		src  resolvedSource
		fp   string
		want restoreHost
	}{
		{"on the data's node", pool("a", "img:1", size), src, "", hostLocal},
		{"another node, data local only", pool("b", "img:1", size), src, "fp1", hostNone},
		{"another node, data remote Ready, same fingerprint", pool("b", "img:1", size), remote, "fp1", hostRemote},
		{"another node, data remote Ready, other fingerprint", pool("b", "img:1", size), remote, "fp2", hostNone},
		{"another image", pool("a", "img:2", size), src, "", hostNone},
		{"another size", pool("a", "img:1", bigger), src, "", hostNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tc.pod.Spec.NodeName,
				Labels: map[string]string{sandlotv1.LabelFingerprint: tc.fp}}}
			if got := hostsRestore(tc.pod, tc.src, node); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestClaimedFor: a pool pod the sandbox claimed counts as its lost claim
// only while it is not going and, for a restore, restores that data — not
// the pod it ran in before a pause.
func TestClaimedFor(t *testing.T) {
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "sbx-uid"}}
	pkg := sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindPausedSandbox, Name: "s", UID: "pkg-uid", Location: "store://paused/s"}
	fork := sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: "snap", UID: "snap-uid", Location: "store://snap"}
	claimed := func(restore *sandlotv1.RestoreRef, deleting bool) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pool-x", Labels: map[string]string{sandlotv1.LabelPool: "py"},
			Annotations: map[string]string{sandlotv1.AnnotationPool: "py"}, OwnerReferences: []metav1.OwnerReference{ownerRef(sbx)}}}
		ann, err := claimAnnotations(pod, &sandlotv1.PoolClaim{Sandbox: "s", SandboxID: sandlotv1.SandboxIDFor(sbx.UID), Restore: restore}, nil)
		if err != nil {
			t.Fatal(err)
		}
		pod.Annotations = ann
		if deleting {
			now := metav1.Now()
			pod.DeletionTimestamp = &now
		}
		return pod
	}
	other := claimed(&pkg, false)
	other.OwnerReferences = []metav1.OwnerReference{{APIVersion: "sandlot.dev/v1alpha1", Kind: "Sandbox", Name: "t", UID: "other", Controller: ptr.To(true)}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		req  poolRequest
		want bool
	}{
		{"the resume's claim, status write lost", claimed(&pkg, false), poolRequest{template: "py", restore: &pkg}, true},
		{"the pod of the fork before the pause, going", claimed(&fork, true), poolRequest{template: "py", restore: &pkg}, false},
		{"the pod of the fork before the pause, not yet going", claimed(&fork, false), poolRequest{template: "py", restore: &pkg}, false},
		{"the resume's claim, deleted under it", claimed(&pkg, true), poolRequest{template: "py", restore: &pkg}, false},
		{"a template claim, status write lost", claimed(nil, false), poolRequest{template: "py", baseRevision: "r"}, true},
		{"another sandbox's", other, poolRequest{template: "py", restore: &pkg}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := claimedFor(tc.pod, sbx, tc.req); got != tc.want {
				t.Fatalf("claimedFor = %v, want %v (annotations %v)", got, tc.want, tc.pod.Annotations)
			}
		})
	}
}

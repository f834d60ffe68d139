package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
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
		Data: dataSource{Nodes: []string{"a"}}}
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

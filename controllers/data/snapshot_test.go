package data

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestSandboxAssignment(t *testing.T) {
	now := metav1.Now()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{sandlotv1.AnnotationWritableLayerMiB: "2048"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "python:3"}}}}
	res := &sandlotv1.Resources{VCPU: 2, MemoryMiB: 1024}
	sbx := func(phase sandlotv1.SandboxPhase, node string) *sandlotv1.Sandbox {
		return &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s"},
			Status: sandlotv1.SandboxStatus{Phase: phase, NodeName: node, SandboxID: "id", Resources: res}}
	}
	deleted := sbx(sandlotv1.SandboxRunning, "n1")
	deleted.DeletionTimestamp = &now
	cases := []struct {
		name   string
		sbx    *sandlotv1.Sandbox
		node   string
		phase  sandlotv1.DataPhase
		reason string
	}{
		{"running", sbx(sandlotv1.SandboxRunning, "n1"), "n1", sandlotv1.DataPending, sandlotv1.ReasonNodeAssigned},
		{"starting waits", sbx(sandlotv1.SandboxStarting, "n1"), "", sandlotv1.DataPending, sandlotv1.ReasonSandboxNotRunning},
		{"paused waits", sbx(sandlotv1.SandboxPaused, ""), "", sandlotv1.DataPending, sandlotv1.ReasonSandboxNotRunning},
		{"failed never", sbx(sandlotv1.SandboxFailed, "n1"), "", sandlotv1.DataFailed, sandlotv1.ReasonSourceFailed},
		{"deleted never", deleted, "", sandlotv1.DataFailed, sandlotv1.ReasonSourceFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := sandboxAssignment(tc.sbx, pod, true, "tpl")
			if a.Node != tc.node || a.Phase != tc.phase || a.Reason != tc.reason {
				t.Fatalf("assignment = %+v", a)
			}
			if a.Node != "" && (a.VM.Image != "python:3" || a.VM.WritableLayerMiB != 2048 || a.VM.Resources != *res || a.Template != "tpl") {
				t.Fatalf("VM = %+v, template %q", a.VM, a.Template)
			}
		})
	}
}

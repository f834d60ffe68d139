package podspec

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestPodPullsAsTheOperatorSays: a sandbox pod carries the operator's
// pull policy (IfNotPresent when unset) and its template's pull Secrets.
func TestPodPullsAsTheOperatorSays(t *testing.T) {
	secrets := []corev1.LocalObjectReference{{Name: "team-registry"}}
	for _, tc := range []struct {
		policy, want corev1.PullPolicy
	}{{"", corev1.PullIfNotPresent}, {corev1.PullAlways, corev1.PullAlways}, {corev1.PullNever, corev1.PullNever}} {
		plan := Plan{Node: "n1", SandboxID: "abcdefghij0123456789", MilliCPUPerVCPU: 1000,
			VM:         sandlotv1.VMSpec{Image: "registry.example/team/python:3", Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}},
			PullPolicy: tc.policy, PullSecrets: secrets}
		pod, err := Render("team-a", plan, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := pod.Spec.Containers[0].ImagePullPolicy; got != tc.want {
			t.Errorf("policy %q: pod pulls %q, want %q", tc.policy, got, tc.want)
		}
		if !slices.Equal(pod.Spec.ImagePullSecrets, secrets) {
			t.Errorf("pull Secrets %v, want the template's %v", pod.Spec.ImagePullSecrets, secrets)
		}
	}
}

package sbxtest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// PodOf re-reads sbx and returns the pod its status names: a pool's or a
// start slot's pod is not named after the sandbox.
func PodOf(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if err := k.Get(ctx, client.ObjectKeyFromObject(sbx), sbx); err != nil {
		t.Fatalf("sandbox %s: %v", sbx.Name, err)
	}
	if sbx.Status.PodName == "" {
		t.Fatalf("sandbox %s names no pod (phase %s)", sbx.Name, sbx.Status.Phase)
	}
	pod := &corev1.Pod{}
	if err := k.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: sbx.Status.PodName}, pod); err != nil {
		t.Fatalf("pod %s of sandbox %s: %v", sbx.Status.PodName, sbx.Name, err)
	}
	return pod
}

package nodeagent

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestClaimEnv: a claimed VM's env is its template's (the pool pod's),
// then an older claim's, then the sandbox's own from its Secret, each
// winning over the one before; a Secret whose env is not JSON fails.
func TestClaimEnv(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: sandlotv1.ContainerName, Env: []corev1.EnvVar{
		{Name: "TEMPLATE", Value: "t"}, {Name: "SHARED", Value: "template"},
		{Name: sandlotv1.EnvAccessToken, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "x"}}},
	}}}}}
	claim := sandlotv1.PoolClaim{Env: map[string]string{"OLD_CLAIM": "c", "SHARED": "claim"}}
	secret := &corev1.Secret{Data: map[string][]byte{sandlotv1.EnvSecretKey: []byte(`{"OWN":"o","SHARED":"sandbox"}`)}}
	got, err := claimEnv(pod, claim, secret)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"TEMPLATE": "t", "OLD_CLAIM": "c", "OWN": "o", "SHARED": "sandbox"}
	if !maps.Equal(got, want) {
		t.Fatalf("env %v, want %v", got, want)
	}
	secret.Data[sandlotv1.EnvSecretKey] = []byte("not json")
	if _, err := claimEnv(pod, claim, secret); err == nil {
		t.Fatal("a Secret whose env is not JSON gave an env")
	}
}

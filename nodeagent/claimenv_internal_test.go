package nodeagent

import (
	"encoding/base64"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestClaimEnv: a claimed VM's env is its template's (the pool pod's),
// then an older claim's, then the sandbox's own sealed in the claim,
// each winning over the one before.
func TestClaimEnv(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: sandlotv1.ContainerName, Env: []corev1.EnvVar{
		{Name: "TEMPLATE", Value: "t"}, {Name: "SHARED", Value: "template"},
		{Name: sandlotv1.EnvAccessToken, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "x"}}},
	}}}}}
	claim := sandlotv1.PoolClaim{Env: map[string]string{"OLD_CLAIM": "c", "SHARED": "claim"}}
	got := claimEnv(pod, claim, map[string]string{"OWN": "o", "SHARED": "sandbox"})
	want := map[string]string{"TEMPLATE": "t", "OLD_CLAIM": "c", "OWN": "o", "SHARED": "sandbox"}
	if !maps.Equal(got, want) {
		t.Fatalf("env %v, want %v", got, want)
	}
}

// TestOpenSealed: the agent opens a claim's token and env, and a
// builder's token, only when sealed to its node's key for that pod and
// sandbox; a claim or builder without one is refused by name. The key
// survives the agent's restart (read back from its file, 0600).
func TestOpenSealed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claim.key")
	key, err := LoadClaimKey(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadClaimKey(path)
	if err != nil || again.PublicBase64() != key.PublicBase64() {
		t.Fatalf("the key read back differs (%v)", err)
	}
	other, err := sealed.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool-1", Annotations: map[string]string{}}}
	id := sealed.Identity{Token: "t0k3n", Env: map[string]string{"K": "v"}}
	seal := func(pub, podName, sandbox string) []byte {
		box, err := sealed.SealIdentity(pub, sealed.Context("ns", podName, sandbox), id)
		if err != nil {
			t.Fatal(err)
		}
		return box
	}
	claim := sandlotv1.PoolClaim{Sandbox: "sbx", Sealed: seal(key.PublicBase64(), "pool-1", "sbx")}
	if got, err := openClaim(again, pod, claim); err != nil || got.Token != "t0k3n" || got.Env["K"] != "v" {
		t.Fatalf("openClaim = %+v, %v", got, err)
	}
	for name, c := range map[string]sandlotv1.PoolClaim{
		"another node's key": {Sandbox: "sbx", Sealed: seal(other.PublicBase64(), "pool-1", "sbx")},
		"another pod":        {Sandbox: "sbx", Sealed: seal(key.PublicBase64(), "pool-2", "sbx")},
		"another sandbox":    {Sandbox: "sbx2", Sealed: claim.Sealed},
		"unsealed":           {Sandbox: "sbx"},
	} {
		if got, err := openClaim(key, pod, c); err == nil || got.Token != "" {
			t.Errorf("%s: opened %+v", name, got)
		}
	}
	if _, err := builderToken(key, pod, "sbx"); err == nil || !strings.Contains(err.Error(), sandlotv1.AnnotationSealedIdentity) {
		t.Errorf("a builder pod without a sealed token: %v", err)
	}
	pod.Annotations[sandlotv1.AnnotationSealedIdentity] = base64.StdEncoding.EncodeToString(claim.Sealed)
	if tok, err := builderToken(key, pod, "sbx"); err != nil || tok != "t0k3n" {
		t.Errorf("builderToken = %q, %v", tok, err)
	}
}

// TestClaimKeyFileRefused: a key file others may read, or a link planted
// where the key goes, is refused, not used.
func TestClaimKeyFileRefused(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose.key")
	if _, err := LoadClaimKey(loose); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadClaimKey(loose); err == nil || !strings.Contains(err.Error(), "only its owner reads") {
		t.Errorf("a key file others read: %v", err)
	}
	// The link points at a good key (0600): only refusing to follow it
	// refuses it.
	good := filepath.Join(dir, "good.key")
	if _, err := LoadClaimKey(good); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadClaimKey(good); err != nil {
		t.Fatalf("the good key read again: %v", err)
	}
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadClaimKey(link); err == nil {
		t.Error("a key path that is a symlink was followed")
	}
}

package e2b

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSecrets: a team stores a secret (201, metadata only, never the
// value), reads it by ID or name, updates it (a new version, the oldest
// kept versions bounded), lists and deletes it; the value is in a Secret
// of its namespace and in no answer; another team's key finds nothing;
// names are unique per team and the limits answer 400 naming the field.
func TestSecrets(t *testing.T) {
	f := setup(t)
	base, keyB, _ := teamServer(t, f, "team-sec", Config{})
	var created secretJSON
	r := call(t, base, "POST", "/secrets", map[string]any{"name": "OpenAI_Key", "value": "sk-very-secret", "metadata": map[string]string{"env": "prod"}},
		"X-API-KEY", f.key)
	if r.code != http.StatusCreated || json.Unmarshal(r.body, &created) != nil || !secretIDRE.MatchString(created.SecretID) ||
		created.Name != "openai_key" || created.CurrentVersion != 1 || created.Metadata["env"] != "prod" {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	call(t, base, "POST", "/secrets", map[string]any{"name": "openai_key", "value": "x"}, "X-API-KEY", f.key).wantError(t, http.StatusConflict, "exists")
	call(t, base, "POST", "/secrets", map[string]any{"name": "sec_x", "value": "x"}, "X-API-KEY", f.key).wantError(t, http.StatusBadRequest, `"name"`)
	call(t, base, "POST", "/secrets", map[string]any{"name": "a"}, "X-API-KEY", f.key).wantError(t, http.StatusBadRequest, `"value"`)
	call(t, base, "POST", "/secrets", map[string]any{"name": "big", "value": strings.Repeat("x", maxSecretValue+1)}, "X-API-KEY", f.key).
		wantError(t, http.StatusBadRequest, `"value"`)
	for i := 2; i <= maxSecretVersions+2; i++ {
		r := call(t, base, "POST", "/secrets/"+created.SecretID, map[string]any{"value": "sk-rotated"}, "X-API-KEY", f.key)
		var got secretJSON
		if r.code != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.CurrentVersion != int64(i) || got.Metadata["env"] != "prod" {
			t.Fatalf("update %d: %d %s", i, r.code, r.body)
		}
	}
	sec := &corev1.Secret{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: "e2b-secret-" + strings.TrimPrefix(created.SecretID, secretIDPrefix)}, sec); err != nil {
		t.Fatal(err)
	}
	if len(sec.Data) != maxSecretVersions || string(sec.Data["v10"]) != "sk-rotated" {
		t.Fatalf("the Secret keeps %d versions (v10 %q)", len(sec.Data), sec.Data["v10"])
	}
	for _, path := range []string{"/secrets", "/secrets/" + created.SecretID, "/secrets/openai_key"} {
		r := call(t, base, "GET", path, nil, "X-API-KEY", f.key)
		if r.code != http.StatusOK || strings.Contains(string(r.body), "sk-") || !strings.Contains(string(r.body), created.SecretID) {
			t.Fatalf("GET %s: %d %s", path, r.code, r.body)
		}
		if path != "/secrets" {
			call(t, base, "GET", path, nil, "X-API-KEY", keyB).wantError(t, http.StatusNotFound, "not found")
		}
	}
	if r := call(t, base, "GET", "/secrets", nil, "X-API-KEY", keyB); r.code != http.StatusOK || string(r.body) != "[]\n" {
		t.Fatalf("team B lists %d %s", r.code, r.body)
	}
	call(t, base, "DELETE", "/secrets/"+created.SecretID, nil, "X-API-KEY", keyB).wantError(t, http.StatusNotFound, "not found")
	if r := call(t, base, "DELETE", "/secrets/openai_key", nil, "X-API-KEY", f.key); r.code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	call(t, base, "GET", "/secrets/"+created.SecretID, nil, "X-API-KEY", f.key).wantError(t, http.StatusNotFound, "not found")
}

// TestSecretMadeByHand: a Secret a namespace user labels as an E2B secret,
// without the API's annotations or any data, is listed and updated like
// the API's own, never a crash.
func TestSecretMadeByHand(t *testing.T) {
	f := setup(t)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "e2b-secret-handmade00000000",
		Labels: map[string]string{LabelE2BSecret: "true"}}}
	if err := f.c.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	if err := waitCached(f.srv.kube, sec); err != nil {
		t.Fatal(err)
	}
	r := f.api(t, "POST", "/secrets/sec_handmade00000000", map[string]any{"value": "v"})
	var got secretJSON
	if r.code != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.CurrentVersion != 1 {
		t.Fatalf("update a hand-made secret: %d %s", r.code, r.body)
	}
}

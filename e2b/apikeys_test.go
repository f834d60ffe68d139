package e2b

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestKeyHashes(t *testing.T) {
	key, err := NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	h1, err1 := HashAPIKey(key)
	h2, err2 := HashAPIKey(key)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if h1 == h2 || strings.Contains(h1, strings.TrimPrefix(key, "e2b_")) {
		t.Fatalf("hashes %q and %q of one key: want each salted, neither holding the key", h1, h2)
	}
	other, _ := NewAPIKey()
	cases := []struct {
		name, key, stored string
		want              bool
	}{
		{"its hash", key, h1, true},
		{"the other salt's hash", key, h2 + "\n", true},
		{"another key", other, h1, false},
		{"an empty key", "", h1, false},
		{"a key in plain text (before the API's start hashed it)", key, key, true},
		{"the hash itself sent as the key", h1, h1, false},
		{"a hash cut short", key, h1[:len(h1)-4], false},
		{"a hash without its salt", key, keyHashPrefix + ":" + strings.Split(h1, ":")[2], false},
		{"a hash that is not base64", key, keyHashPrefix + "!!:??", false},
	}
	for _, c := range cases {
		if got := keyMatches(c.key, c.stored); got != c.want {
			t.Errorf("%s: keyMatches = %v, want %v", c.name, got, c.want)
		}
	}
	if _, err := HashAPIKey(""); err == nil {
		t.Error("HashAPIKey(\"\") gave a hash")
	}
}

func TestKeyRereadsAtMostOnceASecond(t *testing.T) {
	var k keyRereads
	now := time.Unix(1000, 0)
	for _, step := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {100 * time.Millisecond, false}, {999 * time.Millisecond, false}, {time.Second, true}, {1500 * time.Millisecond, false}} {
		if got := k.allow(now.Add(step.at)); got != step.want {
			t.Errorf("allow at +%v = %v, want %v", step.at, got, step.want)
		}
	}
}

// TestKeysAtRest: a key stored in plain text is rewritten to its hash by
// the API's start (as the chart's sandlot-api role may) and still works;
// a key issue-key just stored works on the next request, before the
// API's cache has it.
func TestKeysAtRest(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	legacy, _ := NewAPIKey()
	secretKey := client.ObjectKey{Namespace: testNS, Name: "sandlot-api-keys"}
	addKey(t, f, secretKey, "legacy", legacy)
	if n, err := f.srv.HashStoredKeys(ctx); err != nil || n < 1 {
		t.Fatalf("HashStoredKeys = %d, %v; want at least the legacy key hashed", n, err)
	}
	sec := &corev1.Secret{}
	if err := f.c.Get(ctx, secretKey, sec); err != nil {
		t.Fatal(err)
	}
	for name, v := range sec.Data {
		if !isKeyHash(string(v)) || strings.Contains(string(v), strings.TrimPrefix(legacy, "e2b_")) {
			t.Errorf("key %s is stored as %q: want its salted hash", name, v)
		}
	}
	if r := call(t, f.url, "GET", "/sandboxes", nil, "X-API-KEY", legacy); r.code != http.StatusOK {
		t.Fatalf("GET /sandboxes with the hashed legacy key: %d %s", r.code, r.body)
	}

	fresh, _ := NewAPIKey()
	hash, err := HashAPIKey(fresh)
	if err != nil {
		t.Fatal(err)
	}
	addKey(t, f, secretKey, "fresh", hash)
	f.srv.rereads.mu.Lock()
	f.srv.rereads.last = time.Time{} // another test's unknown key may have spent this second's reread
	f.srv.rereads.mu.Unlock()
	if r := call(t, f.url, "GET", "/sandboxes", nil, "X-API-KEY", fresh); r.code != http.StatusOK {
		t.Fatalf("GET /sandboxes with a key stored a moment ago: %d %s", r.code, r.body)
	}
	call(t, f.url, "GET", "/sandboxes", nil, "X-API-KEY", hash).wantError(t, http.StatusUnauthorized, "invalid API key")
}

func addKey(t *testing.T, f *fixture, key client.ObjectKey, name, value string) {
	t.Helper()
	sec := &corev1.Secret{}
	if err := f.c.Get(context.Background(), key, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[name] = []byte(value)
	if err := f.c.Update(context.Background(), sec); err != nil {
		t.Fatalf("add key %s to Secret %s: %v", name, key, err)
	}
}

package e2b

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// TestVolumes: a team makes, lists, reads and deletes its volumes (a
// directory each, gone with the volume); another team's key finds none
// of them, mounts none of them, and its volume token opens none of them;
// a Volume made with kubectl gets its directory from the sweep.
func TestVolumes(t *testing.T) {
	f := setup(t)
	dir := t.TempDir()
	srv, base, keyB, _ := teamServerOf(t, f, "team-vol", Config{VolumeDir: dir})
	a := mustVolume(t, base, f.key, "data")
	call(t, base, "POST", "/volumes", map[string]any{"name": "data"}, "X-API-KEY", f.key).wantError(t, http.StatusConflict, `"data" exists`)
	call(t, base, "POST", "/volumes", map[string]any{"name": "a b"}, "X-API-KEY", f.key).wantError(t, http.StatusBadRequest, `"name"`)
	vol := &sandlotv1.Volume{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: a.VolumeID}, vol); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, testNS, string(vol.UID))); err != nil || !fi.IsDir() ||
		vol.Status.Phase != sandlotv1.VolumeReady || !slices.Contains(vol.Finalizers, sandlotv1.FinalizerVolumeData) {
		t.Fatalf("volume %s: dir %v, phase %q, finalizers %v", a.VolumeID, err, vol.Status.Phase, vol.Finalizers)
	}
	var got volumeBody
	if r := call(t, base, "GET", "/volumes/"+a.VolumeID, nil, "X-API-KEY", f.key); r.code != http.StatusOK ||
		json.Unmarshal(r.body, &got) != nil || got != a {
		t.Fatalf("GET its volume: %d %s, want %+v", r.code, r.body, a)
	}
	content(t, base, a, "PUT", "/file?path=/x.txt", "hello", http.StatusCreated)
	if r := content(t, base, a, "GET", "/file?path=/x.txt", "", http.StatusOK); string(r.body) != "hello" {
		t.Fatalf("read back %q", r.body)
	}
	b := mustVolume(t, base, keyB, "data") // the same name in another team
	for _, req := range [][2]string{{"GET", "/volumes/" + a.VolumeID}, {"DELETE", "/volumes/" + a.VolumeID}} {
		call(t, base, req[0], req[1], nil, "X-API-KEY", keyB).wantError(t, http.StatusNotFound, "not found")
	}
	if r := call(t, base, "GET", "/volumes", nil, "X-API-KEY", keyB); r.code != http.StatusOK || string(r.body) != string(mustJSON([]volumeBody{{b.VolumeID, "data", ""}}))+"\n" {
		t.Fatalf("team B lists %d %s", r.code, r.body)
	}
	stolen := volumeBody{VolumeID: a.VolumeID, Token: b.Token}
	content(t, base, stolen, "GET", "/file?path=/x.txt", "", http.StatusUnauthorized)
	call(t, base, "POST", "/v2/sandboxes", map[string]any{"templateID": defaultTpl, "volumeMounts": []any{map[string]any{"name": "nope", "path": "/m"}}},
		"X-API-KEY", keyB).wantError(t, http.StatusBadRequest, `no volume named "nope"`)
	sweptByKubectl(t, f, srv, dir)
	if r := call(t, base, "DELETE", "/volumes/"+a.VolumeID, nil, "X-API-KEY", f.key); r.code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.code, r.body)
	}
	if _, err := os.Stat(filepath.Join(dir, testNS, string(vol.UID))); !os.IsNotExist(err) {
		t.Fatalf("the deleted volume's directory: %v", err)
	}
	err := poll.Within(10*time.Second, "the deleted volume gone", func() error {
		return client.IgnoreNotFound(f.c.Get(context.Background(), client.ObjectKeyFromObject(vol), &sandlotv1.Volume{}))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sweptByKubectl: a Volume made with kubectl is made Ready, with its
// directory and finalizer, by the API's sweep.
func sweptByKubectl(t *testing.T, f *fixture, srv *Server, dir string) {
	t.Helper()
	ctx := context.Background()
	v := &sandlotv1.Volume{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "vol-kubectl"}, Spec: sandlotv1.VolumeSpec{Name: "kube"}}
	if err := f.c.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	err := poll.Within(10*time.Second, "the sweep readies a kubectl volume", func() error {
		srv.sweepVolumes(ctx, testNS)
		if err := f.c.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(dir, testNS, string(v.UID))); err != nil || v.Status.Phase != sandlotv1.VolumeReady {
			return &apiError{Message: "not ready: " + string(v.Status.Phase)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustVolume(t *testing.T, base, key, name string) volumeBody {
	t.Helper()
	var v volumeBody
	r := call(t, base, "POST", "/volumes", map[string]any{"name": name}, "X-API-KEY", key)
	if r.code != http.StatusCreated || json.Unmarshal(r.body, &v) != nil || v.VolumeID == "" || v.Token == "" || v.Name != name {
		t.Fatalf("POST /volumes %s: %d %s", name, r.code, r.body)
	}
	return v
}

// content calls the volume content API with v's token.
func content(t *testing.T, base string, v volumeBody, method, path, body string, want int) reply {
	t.Helper()
	var b any
	if body != "" {
		b = body
	}
	r := call(t, base, method, "/volumecontent/"+v.VolumeID+path, b, "Authorization", "Bearer "+v.Token)
	if r.code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, r.code, r.body, want)
	}
	return r
}

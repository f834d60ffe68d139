package oci_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/internal/oci"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// startRegistry runs the CNCF Distribution registry `make registry-bins`
// builds (the one a local cluster runs) on a free loopback port.
func startRegistry(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("SANDLOT_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "sandlot")
	}
	bin := filepath.Join(cache, "registry", "v3.1.2", "registry")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the registry is not built: run `make registry-bins` (%v)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	conf := fmt.Sprintf("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	err = poll.Within(30*time.Second, "the registry answers /v2/", func() error {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestPushKeepsTheDigest: an archive pushed to a real registry is the
// same image there (the manifest digest a node pulls is the archive's),
// under its tag; a second push of it is no error.
func TestPushKeepsTheDigest(t *testing.T) {
	addr := startRegistry(t)
	archive := filepath.Join(t.TempDir(), "app.tar")
	want, err := oci.WriteArchive(archive, "docker.io/sandlot/app:1.2.3", oci.Config{Entrypoint: []string{"/app"}},
		func(w io.Writer) error { return oci.TarTree(w, testTree(t)) })
	if err != nil {
		t.Fatal(err)
	}
	ref := addr + "/sandlot/app:1.2.3"
	for range 2 {
		got, err := oci.Push(context.Background(), archive, ref, true)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("pushed digest %s, archive's %s", got, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v2/sandlot/app/manifests/1.2.3", nil)
	req.Header.Set("Accept", oci.MediaTypeManifest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET the manifest: %d, %v", resp.StatusCode, err)
	}
	if d := resp.Header.Get("Docker-Content-Digest"); d != want || len(m.Layers) != 1 {
		t.Errorf("registry's manifest %s with %d layers, want %s with 1", d, len(m.Layers), want)
	}
	if _, err := oci.Push(context.Background(), archive, "no-tag", true); err == nil {
		t.Error("a reference without host and tag pushed")
	}
}

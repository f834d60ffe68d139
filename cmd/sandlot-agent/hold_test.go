package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The agent finds the store through the link the sandlot-store pod
// writes, resolved to the real path (a later change of the link leaves
// the paths the VMs hold as they were), waiting for it to appear.
func TestAwaitGlobThroughTheStoreLink(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "pods", "uid-1", "volumes", "kubernetes.io~csi")
	if err := os.MkdirAll(filepath.Join(vol, "pv", "mount"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "run", "store-volume")
	go func() {
		time.Sleep(300 * time.Millisecond) // the holder starts after the agent
		if err := writeLink(link, vol); err != nil {
			t.Error(err)
		}
	}()
	got, err := awaitGlob(context.Background(), link+"/*/mount", 5*time.Second)
	if err != nil || got != filepath.Join(vol, "pv", "mount") {
		t.Fatalf("awaitGlob: %q, %v; want %s", got, err, filepath.Join(vol, "pv", "mount"))
	}
	if err := writeLink(link, filepath.Join(dir, "elsewhere")); err != nil { // replaced atomically
		t.Fatal(err)
	}
	if _, err := awaitGlob(context.Background(), link+"/*/mount", 200*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), "after 200ms") {
		t.Fatalf("a link to nothing: %v, want a timeout naming the wait", err)
	}
}

func TestHoldVolumeRefusesRelativePaths(t *testing.T) {
	err := holdCmd(context.Background(), []string{"--link=run/store-volume", "--target=/x"})
	if err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("relative --link: %v", err)
	}
}

// The link goes when the pod stops, unless another pod's replaced it.
func TestHoldVolumeRemovesItsLink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "store-volume")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- holdCmd(ctx, []string{"--link=" + link, "--target=/pods/a"}) }()
	for i := 0; ; i++ {
		if target, err := os.Readlink(link); err == nil && target == "/pods/a" {
			break
		}
		if i > 100 {
			t.Fatal("no link written")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("link left after stop: %v", err)
	}
}

package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// fakeJFS stands in for one node's JuiceFS client in the fast unit tests;
// test/juicefs runs the same store on a live JuiceFS. It follows the
// client's formats:
//   - staging: <cache-dir>/<UUID>/rawstaging/chunks/<id/1e6>/<id/1e3>/<id>_<block>_<size>,
//     one file per block written with --writeback and not uploaded yet;
//   - objects of a file: "<volume>/chunks/..." as `juicefs info` lists them
//     (and one named after its content: a write changes the list);
//   - metrics: juicefs_object_request_errors{mp=...,vol_name=...}.
//
// stage puts a dir's files in staging (what fsync does with --writeback)
// and "uploads" (removes) them after delay; a negative delay keeps them
// until drain.
type fakeJFS struct {
	staging string
	url     string
	delay   time.Duration

	mu      sync.Mutex
	next    int
	objects map[string][]string // file → its object keys
	uploads sync.WaitGroup
}

const blockSize = 4 << 20 // JuiceFS's default block size

func newFakeJFS(t *testing.T, delay time.Duration) *fakeJFS {
	cacheDir := filepath.Join(t.TempDir(), "1ca8e5a2-3b8e-4a2e-9c55-2c3c1b0f9d11") // <cache-dir>/<UUID>
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fakeJFS{staging: filepath.Join(cacheDir, "rawstaging"), delay: delay, next: 1000, objects: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE juicefs_object_request_errors counter")
		fmt.Fprintln(w, `juicefs_object_request_errors{mp="/var/lib/juicefs/volume/pvc-1",vol_name="sandlot"} 3`)
	}))
	f.url = srv.URL + "/metrics"
	t.Cleanup(func() { srv.Close(); f.uploads.Wait() })
	return f
}

// config is a node's store configuration with this fake as its client.
func (f *fakeJFS) config(t *testing.T, mount, node string) store.JuiceFSConfig {
	return store.JuiceFSConfig{MountDir: mount, StagingDir: f.staging, MetricsURL: f.url, Node: node,
		PollInterval: 10 * time.Millisecond, Logf: t.Logf, Keys: testKeys(t), Objects: f.listObjects}
}

// listObjects lists path's staged blocks, then a stand-in object named
// after the file's content: as with JuiceFS, whose writes always make new
// objects, a changed file has a changed layout.
func (f *fakeJFS) listObjects(_ context.Context, path string) ([]store.JuiceFSObject, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var objs []store.JuiceFSObject
	for _, k := range f.objects[path] {
		objs = append(objs, store.JuiceFSObject{Key: k})
	}
	sum := sha256.Sum256(data)
	return append(objs, store.JuiceFSObject{Key: "sandlot/content/" + hex.EncodeToString(sum[:8]), Len: uint32(len(data))}), nil
}

// stage stages one block per 4 MiB of each file under dir.
func (f *fakeJFS) stage(t *testing.T, dir string) {
	var blocks []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		for off := int64(0); off == 0 || off < fi.Size(); off += blockSize {
			blocks = append(blocks, f.block(p, min(blockSize, fi.Size()-off)))
		}
		return nil
	})
	if err == nil {
		err = f.stageBlocks(blocks)
	}
	if err != nil {
		t.Fatalf("fake juicefs: staging %s: %v", dir, err)
	}
}

// block names a new block of file and returns its staging path.
func (f *fakeJFS) block(file string, size int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	id := f.next
	name := filepath.Join("chunks", fmt.Sprint(id/1e6), fmt.Sprint(id/1e3), fmt.Sprintf("%d_0_%d", id, size))
	f.objects[file] = append(f.objects[file], "sandlot/"+filepath.ToSlash(name))
	return filepath.Join(f.staging, name)
}

// stageBlocks creates small stand-ins for the blocks and removes them
// after delay.
func (f *fakeJFS) stageBlocks(blocks []string) error {
	for _, b := range blocks {
		if err := os.MkdirAll(filepath.Dir(b), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(b, []byte("block"), 0o600); err != nil {
			return err
		}
	}
	if f.delay < 0 {
		return nil // stays staged until drain
	}
	f.uploads.Add(1)
	time.AfterFunc(f.delay, func() {
		defer f.uploads.Done()
		for _, b := range blocks {
			os.Remove(b)
		}
	})
	return nil
}

// drain "uploads" everything staged.
func (f *fakeJFS) drain(t *testing.T) {
	if err := os.RemoveAll(filepath.Join(f.staging, "chunks")); err != nil {
		t.Fatal(err)
	}
}

package store_test

import (
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/test/poll"
)

// fakeJFS stands in for one node's JuiceFS client (JuiceFS cannot be
// installed here). It follows the documented formats only:
//   - staging: <cache-dir>/<UUID>/rawstaging/chunks/<id/1e6>/<id/1e3>/<id>_<block>_<size>,
//     one file per block written with --writeback and not uploaded yet
//     (https://juicefs.com/docs/community/cache/#client-write-cache);
//   - metrics: the Prometheus text format with the gauge
//     juicefs_staging_blocks{mp=...,vol_name=...}
//     (https://juicefs.com/docs/community/p8s_metrics/).
//
// stage puts a dir's files in staging (what fsync does with --writeback)
// and "uploads" (removes) them after delay.
type fakeJFS struct {
	staging string
	url     string
	delay   time.Duration

	mu      sync.Mutex
	next    int
	missing bool // serve metrics without the staging gauge
	uploads sync.WaitGroup
	scrapes atomic.Int64 // metrics requests served
}

const blockSize = 4 << 20 // JuiceFS's default block size

func newFakeJFS(t *testing.T, delay time.Duration) *fakeJFS {
	cacheDir := filepath.Join(t.TempDir(), "1ca8e5a2-3b8e-4a2e-9c55-2c3c1b0f9d11") // <cache-dir>/<UUID>
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fakeJFS{staging: filepath.Join(cacheDir, "rawstaging"), delay: delay, next: 1000}
	srv := httptest.NewServer(http.HandlerFunc(f.metrics))
	f.url = srv.URL + "/metrics"
	t.Cleanup(func() { srv.Close(); f.uploads.Wait() })
	return f
}

func (f *fakeJFS) metrics(w http.ResponseWriter, _ *http.Request) {
	defer f.scrapes.Add(1)
	n, bytes := f.count()
	f.mu.Lock()
	missing := f.missing
	f.mu.Unlock()
	fmt.Fprintln(w, "# HELP juicefs_blockcache_blocks number of cached blocks")
	fmt.Fprintln(w, "# TYPE juicefs_blockcache_blocks gauge")
	fmt.Fprintln(w, `juicefs_blockcache_blocks{mp="/var/lib/juicefs/volume/pvc-1",vol_name="sandlot"} 12`)
	if !missing {
		fmt.Fprintln(w, "# HELP juicefs_staging_blocks Number of blocks in the staging path.")
		fmt.Fprintln(w, "# TYPE juicefs_staging_blocks gauge")
		fmt.Fprintf(w, "juicefs_staging_blocks{mp=\"/var/lib/juicefs/volume/pvc-1\",vol_name=\"sandlot\"} %d\n", n)
		fmt.Fprintln(w, "# HELP juicefs_staging_block_bytes Total bytes of blocks in the staging path.")
		fmt.Fprintln(w, "# TYPE juicefs_staging_block_bytes gauge")
		fmt.Fprintf(w, "juicefs_staging_block_bytes{mp=\"/var/lib/juicefs/volume/pvc-1\",vol_name=\"sandlot\"} %d\n", bytes)
	}
}

func (f *fakeJFS) count() (n, bytes int64) {
	filepath.WalkDir(f.staging, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n, bytes = n+1, bytes+fi.Size()
			}
		}
		return nil
	})
	return n, bytes
}

// stage stages one block file per 4 MiB of each file under dir.
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
			blocks = append(blocks, f.block(min(blockSize, fi.Size()-off)))
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

func (f *fakeJFS) block(size int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	id := f.next
	return filepath.Join(f.staging, "chunks", fmt.Sprint(id/1e6), fmt.Sprint(id/1e3), fmt.Sprintf("%d_0_%d", id, size))
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

// waitChecks waits until the store has read the metrics n more times
// (a check of staging per read): the check before the last has ended.
func (f *fakeJFS) waitChecks(t *testing.T, n int64) {
	t.Helper()
	want := f.scrapes.Load() + n
	poll.Eventually(t, 10*time.Second, fmt.Sprintf("%d more metrics reads", n), func() error {
		if got := f.scrapes.Load(); got < want {
			return fmt.Errorf("%d of %d", got, want)
		}
		return nil
	})
}

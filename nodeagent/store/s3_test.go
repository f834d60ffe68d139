package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	s3 "github.com/minio/minio-go/v7"

	miniotest "github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
)

// TestS3 runs the conformance suite against a real MinIO; each subtest
// gets its own bucket and two nodes (two cache roots).
func TestS3(t *testing.T) {
	srv := miniotest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Pair { return s3Pair(t, srv) })
}

func s3Pair(t *testing.T, srv *miniotest.Server) storetest.Pair {
	bucket := srv.NewBucket(t)
	rootA, rootB := t.TempDir(), t.TempDir()
	a := mustS3(t, s3Config(t, srv, bucket, rootA, "node-a"))
	return storetest.Pair{
		A: a, B: mustS3(t, s3Config(t, srv, bucket, rootB, "node-b")),
		Remote: true, BCache: rootB,
		Reopen: func(t *testing.T) store.Store {
			a.Close()
			return mustS3(t, s3Config(t, srv, bucket, rootA, "node-a"))
		},
		OnDisk: func(t *testing.T, dir string) store.Store {
			return mustS3(t, s3Config(t, srv, bucket, dir, "node-c"))
		},
		CrashMidUpload: func(t *testing.T, key string) store.Store {
			return crashMidUpload(t, s3Config(t, srv, bucket, rootA, "node-a"), key)
		},
	}
}

func s3Config(t *testing.T, srv *miniotest.Server, bucket, root, node string) store.S3Config {
	return store.S3Config{
		Endpoint: srv.Endpoint, Bucket: bucket, Region: miniotest.Region, Insecure: true,
		AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey,
		CacheRoot: root, Node: node, Keys: testKeys(t),
		Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Deadline: time.Minute,
		Logf: t.Logf,
	}
}

func mustS3(t *testing.T, cfg store.S3Config) *store.S3 {
	t.Helper()
	s, err := store.NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// crashMidUpload commits key on an instance that dies right before its
// second object's PUT, and returns a new instance over the same cache.
// The new instance must not PUT the object stored before the crash again.
func crashMidUpload(t *testing.T, cfg store.S3Config, key string) store.Store {
	c := mustS3(t, cfg)
	var puts []string
	crashed := make(chan struct{})
	store.SetS3Hooks(c, func(_, object string) {
		puts = append(puts, object)
		if len(puts) == 2 {
			store.AbandonS3(c) // this PUT fails on the canceled context
			close(crashed)
		}
	}, nil)
	if _, err := c.Commit(context.Background(), key); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	select {
	case <-crashed:
	case <-time.After(time.Minute):
		t.Fatal("the upload never reached its second object")
	}
	c.Close() // returns once the abandoned upload stopped
	if len(puts) != 2 {
		t.Fatalf("crashing instance PUT %v, want 2 attempts", puts)
	}
	s := mustS3(t, cfg)
	var mu sync.Mutex
	var again []string
	store.SetS3Hooks(s, func(_, object string) {
		mu.Lock()
		defer mu.Unlock()
		again = append(again, object)
	}, nil)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range again {
			if o == puts[0] {
				t.Errorf("resumed upload stored %s again (it was stored and verified before the crash)", o)
			}
		}
		t.Logf("stored before the crash: %s; after Resume: %v", puts[0], again)
	})
	return s
}

// TestS3UploadFault: MinIO goes away during an upload; the store retries
// with backoff, reports the reason, then Failed at the deadline with the
// local data intact; after MinIO is back, Resume makes it Ready.
func TestS3UploadFault(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := context.Background()
	cfg := s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a")
	cfg.Backoff, cfg.MaxBackoff, cfg.Deadline = 100*time.Millisecond, 400*time.Millisecond, 3*time.Second
	cfg.RequestRetries = 1 // the store's backoff alone paces the attempts
	s := mustS3(t, cfg)
	var attempts, puts atomic.Int32
	store.SetS3Hooks(s, func(_, _ string) {
		if puts.Add(1) == 2 { // one object stored: stop in the middle
			srv.Stop()
		}
	}, func(_ string, n int) { attempts.Store(int32(n)) })

	key := "snapshots/fault"
	want := storetest.Write(t, storetest.Pair{}, s, key, 8<<20)
	start := time.Now()
	if _, err := s.Commit(ctx, key); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	st, retrying := waitFailed(t, s, key)
	el := time.Since(start)
	t.Logf("Failed after %s and %d attempts: %s", el.Round(time.Millisecond), attempts.Load(), st.Message)
	t.Logf("while retrying: %s", retrying)
	switch {
	case attempts.Load() < 3:
		t.Errorf("%d attempts, want retries", attempts.Load())
	case el < cfg.Deadline:
		t.Errorf("Failed after %s, before the %s deadline", el, cfg.Deadline)
	case !strings.Contains(st.Message, "deadline") || !strings.Contains(st.Message, "127.0.0.1"):
		t.Errorf("Failed message %q does not say why", st.Message)
	case !strings.Contains(retrying, "retrying in"):
		t.Errorf("no retry reported while InProgress (last message %q)", retrying)
	}
	want.Check(t, s.Dir(key))
	dir, release, err := s.Open(ctx, key) // restorable here all along
	if err != nil || dir != s.Dir(key) {
		t.Fatalf("Open after Failed: %s, %v", dir, err)
	}
	release()

	srv.Restart()
	if err := s.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	storetest.WaitReady(t, s, key, time.Minute)
	b := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-b"))
	dir, release, err = b.Open(ctx, key)
	if err != nil {
		t.Fatalf("other node's Open after recovery: %v", err)
	}
	defer release()
	want.Check(t, dir)
}

// waitFailed waits for Failed and returns it with the last message seen
// while the upload was still InProgress.
func waitFailed(t *testing.T, s store.Store, key string) (store.Status, string) {
	t.Helper()
	var st store.Status
	var retrying string
	poll.Eventually(t, time.Minute, key+" Failed", func() error {
		var err error
		if st, err = s.Status(context.Background(), key); err != nil {
			t.Fatalf("Status: %v", err)
		}
		switch st.Remote {
		case store.RemoteFailed:
			return nil
		case store.RemoteReady:
			t.Fatalf("Ready although MinIO is down")
		case store.RemoteInProgress:
			if strings.Contains(st.Message, "retrying") {
				retrying = st.Message
			}
		}
		return fmt.Errorf("%+v", st)
	})
	return st, retrying
}

// TestS3OpenRefusesWithoutMarker: objects without the completion marker
// (an upload cut short on another node) are never downloaded.
func TestS3OpenRefusesWithoutMarker(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := context.Background()
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	key := "snapshots/no-marker"
	storetest.Write(t, storetest.Pair{}, a, key, 1<<20)
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, key, time.Minute)
	if err := srv.Client().RemoveObject(ctx, srv.Bucket, key+"/.complete", s3.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	bRoot := t.TempDir()
	b := mustS3(t, s3Config(t, srv, srv.Bucket, bRoot, "node-b"))
	_, _, err := b.Open(ctx, key)
	if !errors.Is(err, store.ErrNotReady) || !strings.Contains(err.Error(), "completion marker") {
		t.Fatalf("Open without marker = %v, want ErrNotReady naming the marker", err)
	}
	if st, err := b.Status(ctx, key); err != nil || st.Remote != store.RemoteInProgress {
		t.Fatalf("Status without marker = %+v, %v; want InProgress", st, err)
	}
	if _, err := os.Stat(filepath.Join(bRoot, key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("something was downloaded: %v", err)
	}
}

// TestS3Throughput logs upload and download rates of a 256 MiB snapshot
// (MinIO and the store on the same machine).
func TestS3Throughput(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	srv := miniotest.Start(t)
	ctx := context.Background()
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	b := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-b"))
	key := "snapshots/throughput"
	want := storetest.Write(t, storetest.Pair{}, a, key, 256<<20)
	start := time.Now()
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, key, 5*time.Minute)
	up := time.Since(start)
	start = time.Now()
	dir, release, err := b.Open(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	down := time.Since(start)
	want.Check(t, dir)
	mb := float64(want.Bytes()) / 1e6
	t.Logf("%.0f MB: Commit to Ready %s (%.0f MB/s, hashing included); Open on another node %s (%.0f MB/s, verification included)",
		mb, up.Round(time.Millisecond), mb/up.Seconds(), down.Round(time.Millisecond), mb/down.Seconds())
}

// TestS3SparseFiles: a sparse file's object holds only its data (a 1 GiB
// writable layer with a few MB written moves a few MB), and another node
// gets the same bytes back with the holes still holes.
func TestS3SparseFiles(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := context.Background()
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	b := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-b"))
	key := "snapshots/sparse"
	dir := a.Dir(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	const size = 1 << 30
	data := map[int64]int64{0: 1 << 20, 300 << 20: 3 << 20, size - 4096: 4096} // offset → length
	layer := filepath.Join(dir, "disk.raw")
	f, err := os.Create(layer)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	var stored int64
	for off, n := range data {
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, int(n)), off); err != nil {
			t.Fatal(err)
		}
		stored += n
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "holes"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "holes"), 64<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, key, 2*time.Minute)
	for name, want := range map[string]int64{"disk.raw": stored, "holes": 0} {
		info, err := srv.Client().StatObject(ctx, srv.Bucket, key+"/"+name, s3.StatObjectOptions{})
		if err != nil || info.Size != want {
			t.Fatalf("object %s: %d bytes (%v), want the %d bytes of data only", name, info.Size, err, want)
		}
	}
	got, release, err := b.Open(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	for _, name := range []string{"disk.raw", "holes"} {
		want, _ := os.ReadFile(filepath.Join(dir, name))
		have, err := os.ReadFile(filepath.Join(got, name))
		if err != nil || !bytes.Equal(want, have) {
			t.Fatalf("%s differs after the download (%v)", name, err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(got, "disk.raw"), &st); err != nil || st.Blocks*512 > 2*stored {
		t.Fatalf("downloaded layer takes %d bytes on disk for %d of data: holes filled", st.Blocks*512, stored)
	}
}

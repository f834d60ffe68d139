package store_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	miniotest "github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
)

// cacheCap holds two of the 1 MiB snapshots below (about 1.2 MiB on disk
// each) and not three.
const cacheCap = 3 << 20

// readyKeys writes and uploads n 1 MiB snapshots on s.
func readyKeys(t *testing.T, s store.Store, prefix string, n int) []storetest.Snapshot {
	t.Helper()
	var snaps []storetest.Snapshot
	for i := range n {
		key := fmt.Sprintf("snapshots/%s-%d", prefix, i)
		snaps = append(snaps, storetest.Write(t, storetest.Pair{}, s, key, 1<<20))
		if _, err := s.Commit(context.Background(), key); err != nil {
			t.Fatalf("Commit %s: %v", key, err)
		}
	}
	for _, sn := range snaps {
		storetest.WaitReady(t, s, sn.Key, time.Minute)
	}
	return snaps
}

// open opens key on s, checks its bytes, and returns the release.
func open(t *testing.T, s store.Store, want storetest.Snapshot) func() {
	t.Helper()
	dir, release, err := s.Open(context.Background(), want.Key)
	if err != nil {
		t.Fatalf("Open %s: %v", want.Key, err)
	}
	want.Check(t, dir)
	return release
}

// cached says whether key's local copy exists on s.
func cached(t *testing.T, s store.Store, key string) bool {
	t.Helper()
	_, err := os.Stat(s.Dir(key))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

func wantCached(t *testing.T, s store.Store, in, out []string) {
	t.Helper()
	for _, k := range in {
		if !cached(t, s, k) {
			t.Errorf("%s was evicted, want it kept", k)
		}
	}
	for _, k := range out {
		if cached(t, s, k) {
			t.Errorf("%s is still cached, want it evicted", k)
		}
	}
}

// TestS3CacheEvictsLRU: downloads beyond the cap evict the least recently
// used copies (by Open and release, not by download order), which the
// next Open downloads again; a restart keeps the account.
func TestS3CacheEvictsLRU(t *testing.T) {
	srv := miniotest.Start(t)
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	k := readyKeys(t, a, "lru", 3)
	cfg := s3Config(t, srv, srv.Bucket, t.TempDir(), "node-b")
	cfg.CacheMaxBytes = cacheCap
	b := mustS3(t, cfg)

	open(t, b, k[0])()
	if per := b.CacheStats().Bytes; 2*per > cacheCap || 3*per <= cacheCap {
		t.Fatalf("a copy takes %d bytes: the test wants two, not three, within %d", per, cacheCap)
	}
	open(t, b, k[1])()
	open(t, b, k[0])() // k[1] is the least recently used now
	open(t, b, k[2])()
	wantCached(t, b, []string{k[0].Key, k[2].Key}, []string{k[1].Key})
	if st, err := b.Status(context.Background(), k[1].Key); err != nil || st.Remote != store.RemoteReady {
		t.Fatalf("Status of an evicted key = %+v, %v; want Ready (from the bucket)", st, err)
	}
	open(t, b, k[1])() // downloaded again; k[0] goes
	wantCached(t, b, []string{k[1].Key, k[2].Key}, []string{k[0].Key})
	st := b.CacheStats()
	if st.Keys != 2 || st.Evictions != 2 || st.Bytes > cacheCap {
		t.Fatalf("CacheStats = %+v, want 2 keys, 2 evictions, within the cap", st)
	}

	b.Close()
	b = mustS3(t, cfg)
	if got := b.CacheStats(); got.Keys != st.Keys || got.Bytes != st.Bytes {
		t.Fatalf("after a restart CacheStats = %+v, want %+v", got, st)
	}
}

// TestS3CacheKeepsPinned: an open copy is never evicted, even when it is
// the least recently used or when the cache is over its cap for it; once
// released, the cache trims itself back under the cap.
func TestS3CacheKeepsPinned(t *testing.T) {
	srv := miniotest.Start(t)
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	k := readyKeys(t, a, "pinned", 3)
	cfg := s3Config(t, srv, srv.Bucket, t.TempDir(), "node-b")
	cfg.CacheMaxBytes = cacheCap
	b := mustS3(t, cfg)

	release0 := open(t, b, k[0]) // a restore from k[0] runs throughout
	open(t, b, k[1])()
	open(t, b, k[2])()
	wantCached(t, b, []string{k[0].Key, k[2].Key}, []string{k[1].Key})
	if err := b.Delete(context.Background(), k[0].Key); !errors.Is(err, store.ErrInUse) {
		t.Fatalf("Delete of the open key = %v, want ErrInUse", err)
	}

	release1 := open(t, b, k[1]) // k[2] goes, k[0] stays
	wantCached(t, b, []string{k[0].Key, k[1].Key}, []string{k[2].Key})
	release2 := open(t, b, k[2]) // all three open: over the cap
	wantCached(t, b, []string{k[0].Key, k[1].Key, k[2].Key}, nil)
	if st := b.CacheStats(); st.Bytes <= cacheCap || st.Keys != 3 {
		t.Fatalf("CacheStats with everything open = %+v, want 3 keys over the cap", st)
	}

	release0()
	poll.Eventually(t, 10*time.Second, "the cache back under its cap", func() error {
		if st := b.CacheStats(); st.Bytes > cacheCap {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	wantCached(t, b, []string{k[1].Key, k[2].Key}, []string{k[0].Key})
	release1()
	release2()
}

// TestS3CacheKeepsHeld: a key the node agent holds (a running sandbox was
// restored from it, long after the restore released its Open) is never
// evicted, whatever the cap; once no longer held it goes like any other.
func TestS3CacheKeepsHeld(t *testing.T) {
	srv := miniotest.Start(t)
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	k := readyKeys(t, a, "held", 3)
	cfg := s3Config(t, srv, srv.Bucket, t.TempDir(), "node-b")
	cfg.CacheMaxBytes = cacheCap
	b := mustS3(t, cfg)
	var mu sync.Mutex
	holding := map[string]bool{k[0].Key: true}
	b.HoldWhile(func(key string) bool {
		mu.Lock()
		defer mu.Unlock()
		return holding[key]
	})

	open(t, b, k[0])() // restored from, released, still held
	open(t, b, k[1])()
	open(t, b, k[2])() // over the cap: k[1], the least recent unheld, goes
	wantCached(t, b, []string{k[0].Key, k[2].Key}, []string{k[1].Key})
	open(t, b, k[1])() // k[2] goes, not the older but held k[0]
	wantCached(t, b, []string{k[0].Key, k[1].Key}, []string{k[2].Key})

	mu.Lock()
	holding = map[string]bool{}
	mu.Unlock()
	open(t, b, k[2])() // now k[0], the least recently used, goes
	wantCached(t, b, []string{k[1].Key, k[2].Key}, []string{k[0].Key})
}

// TestS3CacheKeepsUnuploaded: with a cap nothing fits in, this node's
// keys are evicted once uploaded and verified, but a key whose upload has
// not finished (the only copy) stays, however full the cache is.
func TestS3CacheKeepsUnuploaded(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := context.Background()
	c := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-c"))
	remote := readyKeys(t, c, "remote", 1)[0]
	cfg := s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a")
	cfg.CacheMaxBytes = 1
	a := mustS3(t, cfg)
	unblock := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(unblock) }) }) // before a.Close
	pending := "snapshots/unuploaded"
	store.SetS3Hooks(a, func(key, _ string) {
		if key == pending {
			<-unblock
		}
	}, nil)

	up := readyKeys(t, a, "uploaded", 1)[0]
	waitEvicted(t, a, up.Key) // once Ready
	want := storetest.Write(t, storetest.Pair{}, a, pending, 1<<20)
	if _, err := a.Commit(ctx, pending); err != nil {
		t.Fatal(err)
	}
	open(t, a, remote)() // over the cap: its release trims it away
	waitEvicted(t, a, remote.Key)
	wantCached(t, a, []string{pending}, nil)
	want.Check(t, a.Dir(pending))
	if st, err := a.Status(ctx, pending); err != nil || st.Remote == store.RemoteReady {
		t.Fatalf("Status %s = %+v, %v; want its upload blocked", pending, st, err)
	}

	once.Do(func() { close(unblock) })
	storetest.WaitReady(t, a, pending, time.Minute)
	waitEvicted(t, a, pending)
	open(t, a, want)() // downloaded back from the bucket
	open(t, a, up)()
}

func waitEvicted(t *testing.T, s *store.S3, key string) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, key+" evicted", func() error {
		if cached(t, s, key) {
			return fmt.Errorf("still cached: %+v", s.CacheStats())
		}
		return nil
	})
}

// TestS3CacheDiskShare: without a cap in bytes the cap is a share of the
// cache's filesystem; out-of-range values are refused.
func TestS3CacheDiskShare(t *testing.T) {
	root := t.TempDir()
	cfg := store.S3Config{Endpoint: "127.0.0.1:1", Bucket: "b", CacheRoot: root, CacheMaxDiskPercent: 50, Keys: testKeys(t)}
	s := mustS3(t, cfg)
	var sfs unix.Statfs_t
	if err := unix.Statfs(root, &sfs); err != nil {
		t.Fatal(err)
	}
	if got, want := s.CacheStats().MaxBytes, int64(sfs.Blocks)*sfs.Bsize/100*50; got != want {
		t.Fatalf("cap = %d, want half of the filesystem's %d bytes", got, int64(sfs.Blocks)*sfs.Bsize)
	}
	cfg.CacheMaxBytes = 5 << 20 // bytes win over the share
	if got := mustS3(t, cfg).CacheStats().MaxBytes; got != 5<<20 {
		t.Fatalf("cap = %d, want CacheMaxBytes", got)
	}
	for _, bad := range []store.S3Config{{CacheMaxDiskPercent: 101}, {CacheMaxBytes: -1}} {
		bad.Endpoint, bad.Bucket, bad.CacheRoot, bad.Keys = "127.0.0.1:1", "b", root, testKeys(t)
		if _, err := store.NewS3(bad); err == nil || !strings.Contains(err.Error(), "CacheMax") {
			t.Errorf("NewS3(%+v) = %v, want the cap refused", bad, err)
		}
	}
}

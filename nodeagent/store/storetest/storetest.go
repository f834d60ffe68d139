// Package storetest is the conformance suite every store backend passes.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// Pair is two nodes of one backend sharing its remote; for a backend
// without one (local), B is A.
type Pair struct {
	A, B store.Store
	// Remote: B is another node that may restore A's data once Ready.
	Remote bool
	// BCache is B's local cache root when B downloads data on Open; ""
	// when B reads a shared mount in place.
	BCache string
	// Reopen abandons A as a crashed process would and returns a new
	// instance over A's directories (not resumed).
	Reopen func(t *testing.T) store.Store
	// OnDisk returns a node whose local directories all live under dir
	// (the suite mounts a tiny tmpfs there), sharing A's remote; nil for
	// a live shared volume whose capacity the suite cannot set.
	OnDisk func(t *testing.T, dir string) store.Store
	// AfterWrite, if set, runs after the suite wrote and fsynced the files
	// of dir through s (a fake JuiceFS client stages blocks there).
	AfterWrite func(s store.Store, dir string)
	// CrashMidUpload, for backends that upload, commits key (already
	// written in A.Dir(key)) on a new node-A instance, kills that instance
	// once part of the data is uploaded, and returns a fresh instance over
	// the same directories that has not resumed yet.
	CrashMidUpload func(t *testing.T, key string) store.Store
	// WaitReady bounds how long data takes to become Ready (default 60 s).
	WaitReady time.Duration
}

// Resumer is a store that resumes work a dead process left unfinished.
type Resumer interface {
	Resume(ctx context.Context) error
}

// Run runs the suite; newStore gives each subtest fresh nodes.
func Run(t *testing.T, newStore func(t *testing.T) Pair) {
	tests := []struct {
		name string
		run  func(t *testing.T, p Pair)
	}{
		{"RoundTrip", roundTrip},
		{"ConcurrentCommits", concurrentCommits},
		{"DeleteWhileOpen", deleteWhileOpen},
		{"CrashBeforeCommit", crashBeforeCommit},
		{"CrashMidUpload", crashMidUpload},
		{"DiskFull", diskFull},
		{"UnknownKey", unknownKey},
		{"RemoteStatus", remoteStatus},
		{"SecondNodeDownloads", secondNodeDownloads},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newStore(t)
			if p.WaitReady == 0 {
				p.WaitReady = 60 * time.Second
			}
			tc.run(t, p)
		})
	}
}

var ctx = context.Background()

func roundTrip(t *testing.T, p Pair) {
	key := "snapshots/round-trip"
	want := Write(t, p, p.A, key, 24<<20)
	info, err := p.A.Commit(ctx, key)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if info.Key != key || info.Bytes != want.Bytes() {
		t.Fatalf("Commit = %+v, want key %s and %d bytes", info, key, want.Bytes())
	}
	checkCommitStatus(t, p, info.Remote)
	dir, release, err := p.A.Open(ctx, key)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer release()
	if dir != p.A.Dir(key) {
		t.Fatalf("Open dir = %s, want Dir %s (paths must stay stable)", dir, p.A.Dir(key))
	}
	want.Check(t, dir)
	st, err := p.A.Status(ctx, key)
	if err != nil || st.Bytes != want.Bytes() {
		t.Fatalf("Status = %+v, %v; want %d bytes", st, err, want.Bytes())
	}
	u, err := p.A.Usage(ctx)
	if err != nil || u.Keys < 1 || u.LocalBytes <= 0 && u.RemoteBytes <= 0 {
		t.Fatalf("Usage = %+v, %v", u, err)
	}
	t.Logf("usage %+v", u)
}

// checkCommitStatus: Commit reports NotApplicable for local stores, and
// Pending or InProgress (or an immediate Ready) for remote ones.
func checkCommitStatus(t *testing.T, p Pair, got store.RemoteState) {
	t.Helper()
	switch {
	case !p.Remote && got != store.RemoteNotApplicable:
		t.Fatalf("Commit remote = %s, want NotApplicable", got)
	case p.Remote && got != store.RemotePending && got != store.RemoteInProgress:
		t.Fatalf("Commit remote = %s, want Pending or InProgress", got)
	}
}

func concurrentCommits(t *testing.T, p Pair) {
	const n = 5
	snaps := make([]Snapshot, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		key := fmt.Sprintf("snapshots/concurrent-%d", i)
		wg.Go(func() {
			snaps[i] = Write(t, p, p.A, key, 2<<20)
			if _, err := p.A.Commit(ctx, key); err != nil {
				errs <- fmt.Errorf("Commit %s: %w", key, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, s := range snaps {
		openCheck(t, p.A, s)
		if p.Remote {
			WaitReady(t, p.A, s.Key, p.WaitReady)
			openCheck(t, p.B, s)
		}
	}
}

func openCheck(t *testing.T, s store.Store, want Snapshot) {
	t.Helper()
	dir, release, err := s.Open(ctx, want.Key)
	if err != nil {
		t.Fatalf("Open %s: %v", want.Key, err)
	}
	defer release()
	want.Check(t, dir)
}

func deleteWhileOpen(t *testing.T, p Pair) {
	key := "snapshots/delete-while-open"
	want := Write(t, p, p.A, key, 1<<20)
	if _, err := p.A.Commit(ctx, key); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if p.Remote {
		WaitReady(t, p.A, key, p.WaitReady)
	}
	_, release1, err := p.A.Open(ctx, key)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	dir, release2, err := p.A.Open(ctx, key)
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	for _, release := range []func(){nil, release1, release1} { // releasing twice counts once
		if release != nil {
			release()
		}
		if err := p.A.Delete(ctx, key); !errors.Is(err, store.ErrInUse) {
			t.Fatalf("Delete while opened = %v, want ErrInUse", err)
		}
	}
	want.Check(t, dir)
	release2()
	if err := p.A.Delete(ctx, key); err != nil {
		t.Fatalf("Delete after release: %v", err)
	}
	if _, err := os.Stat(p.A.Dir(key)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Dir after Delete: %v, want gone", err)
	}
	expectNotFound(t, p.A, key)
	if p.Remote {
		expectNotFound(t, p.B, key) // gone from the remote too
	}
}

func expectNotFound(t *testing.T, s store.Store, key string) {
	t.Helper()
	if _, err := s.Status(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Status %s = %v, want ErrNotFound", key, err)
	}
	if _, _, err := s.Open(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Open %s = %v, want ErrNotFound", key, err)
	}
	if err := s.Delete(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Delete %s = %v, want ErrNotFound", key, err)
	}
}

// crashBeforeCommit: data written but not committed when the process
// died is never Ready (nor openable) after a restart, and can be
// committed then.
func crashBeforeCommit(t *testing.T, p Pair) {
	key := "snapshots/crash-before-commit"
	want := Write(t, p, p.A, key, 1<<20)
	s := p.Reopen(t)
	if r, ok := s.(Resumer); ok {
		if err := r.Resume(ctx); err != nil {
			t.Fatalf("Resume: %v", err)
		}
	}
	if st, err := s.Status(ctx, key); !errors.Is(err, store.ErrNotCommitted) {
		t.Fatalf("Status of uncommitted data = %+v, %v; want ErrNotCommitted", st, err)
	}
	if _, _, err := s.Open(ctx, key); !errors.Is(err, store.ErrNotCommitted) {
		t.Fatalf("Open of uncommitted data = %v, want ErrNotCommitted", err)
	}
	if p.Remote { // a shared mount shows B the files, a remote nothing
		if st, err := p.B.Status(ctx, key); !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrNotCommitted) {
			t.Fatalf("other node's Status = %+v, %v; want ErrNotFound or ErrNotCommitted", st, err)
		}
		if _, _, err := p.B.Open(ctx, key); !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrNotCommitted) {
			t.Fatalf("other node's Open = %v, want ErrNotFound or ErrNotCommitted", err)
		}
	}
	if _, err := s.Commit(ctx, key); err != nil {
		t.Fatalf("Commit after restart: %v", err)
	}
	if p.Remote {
		WaitReady(t, s, key, p.WaitReady)
		openCheck(t, p.B, want)
	}
	openCheck(t, s, want)
}

// crashMidUpload: a half-done upload is not Ready on any node; Resume
// finishes it.
func crashMidUpload(t *testing.T, p Pair) {
	if p.CrashMidUpload == nil {
		t.Skip("the backend does not upload")
	}
	key := "snapshots/crash-mid-upload"
	want := Write(t, p, p.A, key, 20<<20)
	s := p.CrashMidUpload(t, key)
	if st, err := s.Status(ctx, key); err != nil || st.Remote == store.RemoteReady {
		t.Fatalf("Status after crash = %+v, %v; want not Ready", st, err)
	}
	if st, err := p.B.Status(ctx, key); err == nil && st.Remote == store.RemoteReady {
		t.Fatalf("other node's Status after crash = %+v, want not Ready", st)
	}
	if _, _, err := p.B.Open(ctx, key); !errors.Is(err, store.ErrNotReady) {
		t.Fatalf("other node's Open after crash = %v, want ErrNotReady", err)
	}
	r, ok := s.(Resumer)
	if !ok {
		t.Fatalf("%T has no Resume", s)
	}
	if err := r.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	WaitReady(t, s, key, p.WaitReady)
	openCheck(t, p.B, want)
}

// diskFull: a write into a full disk fails with ENOSPC (what the VM layer
// sees), the leftovers are never Ready and Delete clears them; a node
// whose cache is full gets a clear error from Open and no partial data.
func diskFull(t *testing.T, p Pair) {
	if p.OnDisk == nil {
		t.Skip("the backend's disk is a shared volume the suite cannot shrink to 1 MiB (its run on a stand-in directory covers it)")
	}
	dir := TinyDisk(t, "1m")
	s := p.OnDisk(t, dir)
	key := "snapshots/disk-full"
	err := writeFile(filepath.Join(s.Dir(key), "memory"), 2<<20, 1)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 2 MiB into a 1 MiB disk: %v, want ENOSPC", err)
	}
	if st, err := s.Status(ctx, key); !errors.Is(err, store.ErrNotCommitted) {
		t.Fatalf("Status of the failed write = %+v, %v; want ErrNotCommitted", st, err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete of the failed write's leftovers: %v", err)
	}
	small := Write(t, p, s, "snapshots/after-disk-full", 64<<10)
	if _, err := s.Commit(ctx, small.Key); err != nil {
		t.Fatalf("Commit once space is free again: %v", err)
	}
	if p.Remote && p.BCache != "" {
		fullCache(t, p, s)
	}
}

// fullCache: Open on a node whose cache cannot hold the data.
func fullCache(t *testing.T, p Pair, s store.Store) {
	key := "snapshots/too-big"
	Write(t, p, p.A, key, 2<<20)
	if _, err := p.A.Commit(ctx, key); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	WaitReady(t, p.A, key, p.WaitReady)
	_, _, err := s.Open(ctx, key)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "full") {
		t.Fatalf("Open into a full cache = %v, want a clear ENOSPC error", err)
	}
	t.Logf("Open into a full cache: %v", err)
	if _, err := os.Stat(s.Dir(key)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("partial download left at %s: %v", s.Dir(key), err)
	}
}

func unknownKey(t *testing.T, p Pair) {
	expectNotFound(t, p.A, "snapshots/unknown")
	if _, err := p.A.Commit(ctx, "snapshots/unknown"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Commit of nothing = %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "../x", "/abs", "a/../b", ".store/x", "a//b"} {
		if d := p.A.Dir(bad); d != "" {
			t.Fatalf("Dir(%q) = %q, want \"\"", bad, d)
		}
		if _, err := p.A.Status(ctx, bad); err == nil {
			t.Fatalf("Status(%q) accepted an invalid key", bad)
		}
	}
}

// remoteStatus: Pending/InProgress, then Ready on both nodes.
func remoteStatus(t *testing.T, p Pair) {
	if !p.Remote {
		st := mustCommitStatus(t, p, "snapshots/remote-status")
		if st.Remote != store.RemoteNotApplicable {
			t.Fatalf("local Status = %+v, want NotApplicable", st)
		}
		return
	}
	key := "snapshots/remote-status"
	want := Write(t, p, p.A, key, 16<<20)
	info, err := p.A.Commit(ctx, key)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	seen := WaitReady(t, p.A, key, p.WaitReady)
	t.Logf("Commit %s, then %v", info.Remote, seen)
	if s0 := seen[0]; s0 != store.RemotePending && s0 != store.RemoteInProgress {
		t.Fatalf("first Status after Commit = %s, want Pending or InProgress", s0)
	}
	st, err := p.A.Status(ctx, key)
	if err != nil || st.Bytes != want.Bytes() || st.ReadyTime.IsZero() {
		t.Fatalf("Ready Status = %+v, %v; want %d bytes and a ready time", st, err, want.Bytes())
	}
	stB := WaitReadyQuiet(t, p.B, key, p.WaitReady)
	if stB.Bytes != want.Bytes() {
		t.Fatalf("other node's Status = %+v, want %d bytes", stB, want.Bytes())
	}
}

func mustCommitStatus(t *testing.T, p Pair, key string) store.Status {
	Write(t, p, p.A, key, 4096)
	if _, err := p.A.Commit(ctx, key); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	st, err := p.A.Status(ctx, key)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

// secondNodeDownloads: B's cache holds nothing of the key before Open;
// Open returns the same bytes (downloaded into B's cache when B has one).
func secondNodeDownloads(t *testing.T, p Pair) {
	if !p.Remote {
		t.Skip("one node only")
	}
	key := "snapshots/second-node"
	want := Write(t, p, p.A, key, 24<<20)
	if _, err := p.A.Commit(ctx, key); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	WaitReady(t, p.A, key, p.WaitReady)
	if p.BCache != "" {
		if n := countFiles(t, p.BCache); n != 0 {
			t.Fatalf("B's cache %s holds %d files before Open", p.BCache, n)
		}
	}
	start := time.Now()
	dir, release, err := p.B.Open(ctx, key)
	if err != nil {
		t.Fatalf("B Open: %v", err)
	}
	defer release()
	el := time.Since(start)
	want.Check(t, dir)
	if p.BCache != "" {
		t.Logf("B downloaded %d bytes in %s (%.1f MB/s)", want.Bytes(), el.Round(time.Millisecond), float64(want.Bytes())/1e6/el.Seconds())
		if !strings.HasPrefix(dir, p.BCache+string(filepath.Separator)) || dir != p.B.Dir(key) {
			t.Fatalf("B Open dir = %s, want B.Dir %s inside B's cache %s", dir, p.B.Dir(key), p.BCache)
		}
		checkSparse(t, filepath.Join(dir, "disk.raw"))
	}
	if st, err := p.B.Status(ctx, key); err != nil || st.Remote != store.RemoteReady {
		t.Fatalf("B Status after Open = %+v, %v", st, err)
	}
}

// checkSparse: the disk's hole survived the trip.
func checkSparse(t *testing.T, p string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 >= st.Size {
		t.Fatalf("%s: %d bytes allocated of %d: holes were filled", p, st.Blocks*512, st.Size)
	}
}

func countFiles(t *testing.T, root string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

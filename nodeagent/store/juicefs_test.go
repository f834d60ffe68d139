package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
)

// TestJuiceFS runs the conformance suite on a shared directory standing
// in for the JuiceFS mount, with a fake client per node (test/juicefs
// runs it on a live JuiceFS).
func TestJuiceFS(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Pair {
		mount := t.TempDir()
		var mu sync.Mutex
		fakes := map[store.Store]*fakeJFS{}
		node := func(t *testing.T, mount, name string, f *fakeJFS) store.Store {
			s := mustJFS(t, f.config(t, mount, name))
			mu.Lock()
			fakes[s] = f
			mu.Unlock()
			return s
		}
		fa, fb := newFakeJFS(t, 300*time.Millisecond), newFakeJFS(t, 300*time.Millisecond)
		a := node(t, mount, "node-a", fa)
		return storetest.Pair{
			A: a, B: node(t, mount, "node-b", fb), Remote: true,
			Reopen: func(t *testing.T) store.Store {
				a.(*store.JuiceFS).Close()
				return node(t, mount, "node-a", fa)
			},
			OnDisk: func(t *testing.T, dir string) store.Store {
				return node(t, dir, "node-c", newFakeJFS(t, 300*time.Millisecond))
			},
			AfterWrite: func(s store.Store, dir string) {
				mu.Lock()
				f := fakes[s]
				mu.Unlock()
				f.stage(t, dir)
			},
			WaitReady: 10 * time.Second,
		}
	})
}

func mustJFS(t *testing.T, cfg store.JuiceFSConfig) *store.JuiceFS {
	t.Helper()
	s, err := store.NewJuiceFS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// jfsNode is a node whose fake client keeps blocks staged until drained.
func jfsNode(t *testing.T, mount, name string) (*store.JuiceFS, *fakeJFS) {
	f := newFakeJFS(t, -1)
	return mustJFS(t, f.config(t, mount, name)), f
}

// commitStaged writes key, stages its blocks with f and commits it.
func commitStaged(t *testing.T, s *store.JuiceFS, f *fakeJFS, key string, size int64) storetest.Snapshot {
	t.Helper()
	snap := storetest.Write(t, storetest.Pair{}, s, key, size)
	if f != nil {
		f.stage(t, s.Dir(key))
	}
	if _, err := s.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestJuiceFSPerKey: a key is InProgress while its own blocks are staged,
// with their count; a key with nothing staged is Ready meanwhile (another
// sandbox's steady writes hold back no one else); the writer opens its
// data at once, other nodes only once Ready.
func TestJuiceFSPerKey(t *testing.T) {
	mount := t.TempDir()
	a, fa := jfsNode(t, mount, "node-a")
	b, _ := jfsNode(t, mount, "node-b")
	key := "snapshots/staging"
	snap := commitStaged(t, a, fa, key, 9<<20)
	st := waitMessage(t, a, key, "writeback staging")
	if st.Remote != store.RemoteInProgress || !strings.Contains(st.Message, "8 blocks") {
		t.Fatalf("Status while staged = %+v, want InProgress with its 8 blocks", st)
	}
	commitStaged(t, a, nil, "snapshots/uploaded", 1<<20)
	storetest.WaitReady(t, a, "snapshots/uploaded", 10*time.Second)
	if st, _ := a.Status(ctx, key); st.Remote != store.RemoteInProgress {
		t.Fatalf("Status of the staged key beside a Ready one = %+v, want InProgress", st)
	}
	if _, _, err := b.Open(ctx, key); !errors.Is(err, store.ErrNotReady) {
		t.Fatalf("other node's Open while staged = %v, want ErrNotReady", err)
	}
	dir, release, err := a.Open(ctx, key)
	if err != nil {
		t.Fatalf("writer's Open while staged: %v", err)
	}
	release()
	fa.drain(t)
	storetest.WaitReady(t, a, key, 10*time.Second)
	dir, release, err = b.Open(ctx, key)
	if err != nil {
		t.Fatalf("other node's Open once Ready: %v", err)
	}
	defer release()
	snap.Check(t, dir)
}

var ctx = context.Background()

// waitMessage polls Status until its message contains want.
func waitMessage(t *testing.T, s store.Store, key, want string) store.Status {
	t.Helper()
	var st store.Status
	poll.Eventually(t, 10*time.Second, fmt.Sprintf("%s: a message with %q", key, want), func() error {
		var err error
		if st, err = s.Status(ctx, key); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(st.Message, want) {
			return fmt.Errorf("Status %+v", st)
		}
		return nil
	})
	return st
}

// TestJuiceFSDeadline: blocks still staged at the deadline make the key
// Failed with what is left and the client's failed requests; a new Commit
// waits again and the key is Ready once they are uploaded.
func TestJuiceFSDeadline(t *testing.T) {
	f := newFakeJFS(t, -1)
	cfg := f.config(t, t.TempDir(), "node-a")
	cfg.UploadDeadline = 300 * time.Millisecond
	a := mustJFS(t, cfg)
	key := "snapshots/late"
	commitStaged(t, a, f, key, 1<<20)
	st := waitMessage(t, a, key, "after 300ms")
	if st.Remote != store.RemoteFailed || !strings.Contains(st.Message, "4 blocks") || !strings.Contains(st.Message, "failed 3 times") {
		t.Fatalf("Status past the deadline = %+v, want Failed with its 4 blocks left and the client's 3 failed requests", st)
	}
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.Status(ctx, key); st.Remote != store.RemoteInProgress {
		t.Fatalf("Status after a new Commit = %+v, want InProgress", st)
	}
	f.drain(t)
	storetest.WaitReady(t, a, key, 10*time.Second)
}

// TestJuiceFSWrongStagingDir: a StagingDir whose <UUID> parent does not
// exist is an error, not "nothing staged".
func TestJuiceFSWrongStagingDir(t *testing.T) {
	cfg := newFakeJFS(t, -1).config(t, t.TempDir(), "node-a")
	cfg.StagingDir = t.TempDir() + "/no-such-uuid/rawstaging"
	a := mustJFS(t, cfg)
	key := "snapshots/wrong-dir"
	storetest.Write(t, storetest.Pair{}, a, key, 1<<20)
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	st := waitMessage(t, a, key, "no-such-uuid")
	if st.Remote != store.RemoteInProgress {
		t.Fatalf("Status = %+v, want InProgress", st)
	}
}

// TestJuiceFSResume: after a restart, Resume watches this node's pending
// keys again and leaves other nodes' keys to them.
func TestJuiceFSResume(t *testing.T) {
	mount := t.TempDir()
	a, fa := jfsNode(t, mount, "node-a")
	b, fb := jfsNode(t, mount, "node-b")
	for _, n := range []struct {
		s    *store.JuiceFS
		f    *fakeJFS
		name string
	}{{a, fa, "a"}, {b, fb, "b"}} {
		key := "snapshots/resume-" + n.name
		commitStaged(t, n.s, n.f, key, 1<<20)
	}
	a.Close() // "crash" with snapshots/resume-a pending
	fa.drain(t)
	a2 := mustJFS(t, fa.config(t, mount, "node-a"))
	if st, err := a2.Status(ctx, "snapshots/resume-a"); err != nil || st.Remote != store.RemoteInProgress {
		t.Fatalf("Status before Resume = %+v, %v; want InProgress", st, err)
	}
	if err := a2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a2, "snapshots/resume-a", 10*time.Second)
	// b's key is b's to watch, not a2's.
	a2.Close()
	if st, err := a2.Status(ctx, "snapshots/resume-b"); err != nil || st.Remote != store.RemoteInProgress || !strings.Contains(st.Message, "node-b") {
		t.Fatalf("other node's key = %+v, %v; want InProgress waiting for node-b", st, err)
	}
}

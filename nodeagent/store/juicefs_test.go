package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
	"github.com/sandlot-dev/sandlot/test/poll"
)

// TestJuiceFS runs the conformance suite on a shared directory standing
// in for the JuiceFS mount, with a fake client per node (no live JuiceFS
// was exercised: see fakeJFS). Node A reads staging from both the metrics
// endpoint and the staging dir, node B from the metrics only.
func TestJuiceFS(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Pair {
		mount := t.TempDir()
		var mu sync.Mutex
		fakes := map[store.Store]*fakeJFS{}
		node := func(t *testing.T, mount, name string, f *fakeJFS, useDir bool) store.Store {
			cfg := store.JuiceFSConfig{MountDir: mount, MetricsURL: f.url, Node: name, PollInterval: 20 * time.Millisecond, Logf: t.Logf, Keys: testKeys(t)}
			if useDir {
				cfg.StagingDir = f.staging
			}
			s := mustJFS(t, cfg)
			mu.Lock()
			fakes[s] = f
			mu.Unlock()
			return s
		}
		fa, fb := newFakeJFS(t, 300*time.Millisecond), newFakeJFS(t, 300*time.Millisecond)
		a := node(t, mount, "node-a", fa, true)
		return storetest.Pair{
			A: a, B: node(t, mount, "node-b", fb, false), Remote: true,
			Reopen: func(t *testing.T) store.Store {
				a.(*store.JuiceFS).Close()
				return node(t, mount, "node-a", fa, true)
			},
			OnDisk: func(t *testing.T, dir string) store.Store {
				return node(t, dir, "node-c", newFakeJFS(t, 300*time.Millisecond), true)
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
func jfsNode(t *testing.T, mount, name string, metrics, dir bool) (*store.JuiceFS, *fakeJFS) {
	f := newFakeJFS(t, -1)
	cfg := store.JuiceFSConfig{MountDir: mount, Node: name, PollInterval: 10 * time.Millisecond, Logf: t.Logf, Keys: testKeys(t)}
	if metrics {
		cfg.MetricsURL = f.url
	}
	if dir {
		cfg.StagingDir = f.staging
	}
	return mustJFS(t, cfg), f
}

// TestJuiceFSStagingSources: each source alone holds a key InProgress
// while blocks are staged, with the count in the message; the writer
// opens its data at once, other nodes only once Ready.
func TestJuiceFSStagingSources(t *testing.T) {
	for _, tc := range []struct {
		name         string
		metrics, dir bool
	}{{"metrics", true, false}, {"stagingDir", false, true}, {"both", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			mount := t.TempDir()
			a, fa := jfsNode(t, mount, "node-a", tc.metrics, tc.dir)
			b, _ := jfsNode(t, mount, "node-b", true, false)
			key := "snapshots/staging"
			snap := storetest.Write(t, storetest.Pair{}, a, key, 9<<20)
			fa.stage(t, a.Dir(key))
			if _, err := a.Commit(ctx, key); err != nil {
				t.Fatal(err)
			}
			st := waitMessage(t, a, key, "staged at the last check")
			if st.Remote != api.RemoteInProgress || !strings.Contains(st.Message, "(8 staged") {
				t.Fatalf("Status while staged = %+v, want InProgress with 8 staged blocks", st)
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
		})
	}
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

// TestJuiceFSNoGauge: an endpoint without juicefs_staging_blocks (an
// older client, a wrong URL) never makes a key Ready.
func TestJuiceFSNoGauge(t *testing.T) {
	a, fa := jfsNode(t, t.TempDir(), "node-a", true, false)
	fa.mu.Lock()
	fa.missing = true
	fa.mu.Unlock()
	key := "snapshots/no-gauge"
	storetest.Write(t, storetest.Pair{}, a, key, 1<<20)
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	st := waitMessage(t, a, key, "no juicefs_staging_blocks")
	fa.waitChecks(t, 2) // a check after the one that set the message ended too
	if st, _ = a.Status(ctx, key); st.Remote != api.RemoteInProgress {
		t.Fatalf("Status without the gauge = %+v, want InProgress", st)
	}
}

// TestJuiceFSWrongStagingDir: a StagingDir whose <UUID> parent does not
// exist is an error, not "nothing staged".
func TestJuiceFSWrongStagingDir(t *testing.T) {
	a := mustJFS(t, store.JuiceFSConfig{MountDir: t.TempDir(), StagingDir: t.TempDir() + "/no-such-uuid/rawstaging", Node: "node-a", PollInterval: 10 * time.Millisecond, Keys: testKeys(t)})
	key := "snapshots/wrong-dir"
	storetest.Write(t, storetest.Pair{}, a, key, 1<<20)
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	st := waitMessage(t, a, key, "cannot read staging")
	if st.Remote != api.RemoteInProgress {
		t.Fatalf("Status = %+v, want InProgress", st)
	}
}

// TestJuiceFSResume: after a restart, Resume watches this node's pending
// keys again and leaves other nodes' keys to them.
func TestJuiceFSResume(t *testing.T) {
	mount := t.TempDir()
	a, fa := jfsNode(t, mount, "node-a", true, true)
	b, fb := jfsNode(t, mount, "node-b", true, false)
	for _, n := range []struct {
		s    *store.JuiceFS
		f    *fakeJFS
		name string
	}{{a, fa, "a"}, {b, fb, "b"}} {
		key := "snapshots/resume-" + n.name
		storetest.Write(t, storetest.Pair{}, n.s, key, 1<<20)
		n.f.stage(t, n.s.Dir(key))
		if _, err := n.s.Commit(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	a.Close() // "crash" with snapshots/resume-a pending
	fa.drain(t)
	a2 := mustJFS(t, store.JuiceFSConfig{MountDir: mount, MetricsURL: fa.url, StagingDir: fa.staging, Node: "node-a", PollInterval: 10 * time.Millisecond, Keys: testKeys(t)})
	if st, err := a2.Status(ctx, "snapshots/resume-a"); err != nil || st.Remote != api.RemoteInProgress {
		t.Fatalf("Status before Resume = %+v, %v; want InProgress", st, err)
	}
	if err := a2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a2, "snapshots/resume-a", 10*time.Second)
	// a2's empty staging must not make b's key Ready: Close waits for the
	// check that made a's key Ready (and would have made b's) to end.
	a2.Close()
	if st, err := a2.Status(ctx, "snapshots/resume-b"); err != nil || st.Remote != api.RemoteInProgress || !strings.Contains(st.Message, "node-b") {
		t.Fatalf("other node's key = %+v, %v; want InProgress waiting for node-b", st, err)
	}
}

package juicefs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/juicefs"
	"github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
)

// One live volume for the package: a Redis, a MinIO and two clients,
// "node-a" and "node-b", each with its own cache and writeback staging.
var (
	vol    *juicefs.Volume
	s3     *minio.Server
	ma, mb *juicefs.Mount
	seq    atomic.Int64
)

func TestMain(m *testing.M) {
	code := 1
	err := crienv.Run("juicefs", func(t crienv.T) {
		dir, err := os.MkdirTemp("/var/tmp", "sl-juicefs-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		s3 = minio.StartIn(t, filepath.Join(dir, "minio"))
		vol = juicefs.Start(t, filepath.Join(dir, "jfs"), s3)
		ma, mb = vol.Mount("node-a"), vol.Mount("node-b")
		code = m.Run()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

var ctx = context.Background()

// node is a juicefs store of one node on its live mount, under a
// directory of the volume fresh for each test (the same on both mounts).
func node(t *testing.T, m *juicefs.Mount, sub, name string, deadline time.Duration) *store.JuiceFS {
	t.Helper()
	s, err := store.NewJuiceFS(store.JuiceFSConfig{MountDir: filepath.Join(m.Dir, sub), StagingDir: m.StagingDir,
		MetricsURL: m.MetricsURL, Node: name, PollInterval: 100 * time.Millisecond, UploadDeadline: deadline,
		Logf: t.Logf, Keys: keys(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func keys(t *testing.T) *store.Keys {
	k, err := store.NewKeys([]byte("live-juicefs-test-manifest-key-32b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func fresh() string { return fmt.Sprintf("t%d", seq.Add(1)) }

// TestConformance runs the store suite on the live volume: node A writes
// through its client, node B reads in place through its own.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Pair {
		sub := fresh()
		a := node(t, ma, sub, "node-a", time.Hour)
		return storetest.Pair{
			A: a, B: node(t, mb, sub, "node-b", time.Hour), Remote: true,
			Reopen: func(t *testing.T) store.Store {
				a.Close()
				return node(t, ma, sub, "node-a", time.Hour)
			},
			CrashMidUpload: func(t *testing.T, key string) store.Store {
				// MinIO down: the blocks stay staged while an agent
				// commits and dies.
				s3.Stop()
				defer s3.Restart()
				dead := node(t, ma, sub, "node-a", time.Hour)
				if _, err := dead.Commit(ctx, key); err != nil {
					t.Fatal(err)
				}
				dead.Close()
				return node(t, ma, sub, "node-a", time.Hour)
			},
			// A block that failed to upload is retried by the client's
			// minutely scan.
			WaitReady: 120 * time.Second,
		}
	})
}

// TestReadyMeansInTheBucket: a snapshot is InProgress at Commit and Ready
// only once every object of its files is in the bucket, uploaded by the
// writer's client (MinIO's PutObject count grows by them).
func TestReadyMeansInTheBucket(t *testing.T) {
	sub := fresh()
	a := node(t, ma, sub, "node-a", time.Hour)
	puts := s3.Requests(t, "PutObject")
	key := "snapshots/in-bucket"
	want := storetest.Write(t, storetest.Pair{}, a, key, 24<<20)
	info, err := a.Commit(ctx, key)
	if err != nil || info.Remote != store.RemoteInProgress {
		t.Fatalf("Commit = %+v, %v; want InProgress", info, err)
	}
	storetest.WaitReady(t, a, key, 60*time.Second)
	objs := objectsOf(t, a.Dir(key))
	inBucket := map[string]bool{}
	for _, o := range s3.Objects(t, vol.Bucket, juicefs.VolumeName+"/chunks/") {
		inBucket[o] = true
	}
	for _, o := range objs {
		if !inBucket[o] {
			t.Fatalf("Ready, but object %s of %s is not in the bucket", o, key)
		}
	}
	if got := s3.Requests(t, "PutObject") - puts; got < len(objs) {
		t.Fatalf("PutObject requests since the write = %d, want at least the snapshot's %d objects", got, len(objs))
	}
	dir, release, err := node(t, mb, sub, "node-b", time.Hour).Open(ctx, key)
	if err != nil {
		t.Fatalf("node B's Open once Ready: %v", err)
	}
	defer release()
	want.Check(t, dir)
	t.Logf("%s: %d objects in the bucket, %d PutObject requests", key, len(objs), s3.Requests(t, "PutObject")-puts)
}

// objectsOf lists the objects of every file under dir, from its client.
func objectsOf(t *testing.T, dir string) []string {
	t.Helper()
	var all []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		objs, err := store.JuiceFSObjects(ctx, p)
		for _, o := range objs {
			if o.Key != "" {
				all = append(all, o.Key)
			}
		}
		return err
	})
	if err != nil || len(all) == 0 {
		t.Fatalf("objects of %s: %v (%d)", dir, err, len(all))
	}
	return all
}

// TestMinIODown: blocks that cannot be uploaded keep their snapshot
// InProgress with what is left, then Failed with the client's failures
// after the deadline, never Ready meanwhile; nothing is lost: with MinIO
// back, a new Commit becomes Ready and node B reads the same bytes.
func TestMinIODown(t *testing.T) {
	sub := fresh()
	a := node(t, ma, sub, "node-a", 15*time.Second)
	key := "snapshots/minio-down"
	s3.Stop()
	defer s3.Restart()
	want := storetest.Write(t, storetest.Pair{}, a, key, 8<<20)
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	var sawInProgress bool
	poll.Eventually(t, 60*time.Second, key+" Failed", func() error {
		st, err := a.Status(ctx, key)
		switch {
		case err != nil:
			t.Fatal(err)
		case st.Remote == store.RemoteReady:
			t.Fatalf("Ready with MinIO down: %+v", st)
		case st.Remote == store.RemoteInProgress && strings.Contains(st.Message, "writeback staging"):
			sawInProgress = true
		case st.Remote == store.RemoteFailed:
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
	st, _ := a.Status(ctx, key)
	if !sawInProgress || !strings.Contains(st.Message, "after 15s") || !strings.Contains(st.Message, "object requests failed") {
		t.Fatalf("Failed = %+v (InProgress with staged blocks seen: %v); want what is left and the client's failures", st, sawInProgress)
	}
	t.Logf("with MinIO down: %s", st.Message)
	s3.Restart()
	// The client keeps the blocks and uploads them on its next scan of
	// staging (every minute); then a new Commit is Ready.
	poll.Eventually(t, 2*time.Minute, "the client's staging drained", func() error {
		if n := stagedBlocks(ma.StagingDir); n > 0 {
			return fmt.Errorf("%d blocks staged", n)
		}
		return nil
	})
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, key, 30*time.Second)
	dir, release, err := node(t, mb, sub, "node-b", time.Hour).Open(ctx, key)
	if err != nil {
		t.Fatalf("node B's Open after MinIO came back: %v", err)
	}
	defer release()
	want.Check(t, dir)
}

// TestSteadyWriter: while another sandbox of the node writes and fsyncs
// without pause (its blocks in staging all along), a new snapshot still
// becomes Ready: each snapshot waits for its own blocks only.
func TestSteadyWriter(t *testing.T) {
	sub := fresh()
	a := node(t, ma, sub, "node-a", time.Hour)
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- writeSteadily(filepath.Join(ma.Dir, sub, "writer"), stop) }()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("writer: %v", err)
		}
	}()
	poll.Eventually(t, 30*time.Second, "the writer's blocks in staging", func() error {
		if stagedBlocks(ma.StagingDir) == 0 {
			return fmt.Errorf("nothing staged")
		}
		return nil
	})
	key := "snapshots/beside-a-writer"
	storetest.Write(t, storetest.Pair{}, a, key, 8<<20)
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	var busy, samples int
	poll.Eventually(t, 60*time.Second, key+" Ready beside the writer", func() error {
		samples++
		if stagedBlocks(ma.StagingDir) > 0 {
			busy++
		}
		st, err := a.Status(ctx, key)
		if err != nil || st.Remote != store.RemoteReady {
			return fmt.Errorf("%+v, %v", st, err)
		}
		return nil
	})
	if busy == 0 {
		t.Fatalf("staging was empty at each of %d checks while %s waited: the writer did not keep it busy", samples, key)
	}
	t.Logf("%s Ready; staging held blocks at %d of %d checks meanwhile", key, busy, samples)
}

// writeSteadily writes and fsyncs 4 MiB at a time, round a 32 MiB file,
// until stop.
func writeSteadily(p string, stop chan struct{}) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		for j := range buf {
			buf[j] = byte(i + j*7)
		}
		if _, err := f.WriteAt(buf, int64(i%8)*int64(len(buf))); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
}

// stagedBlocks counts the block files in a client's staging directory.
func stagedBlocks(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// TestRedisRestart: the metadata engine restarting under both clients
// (a reader holding a file open on node B) loses nothing: the open file
// reads on, and later snapshots become Ready and open on the other node.
func TestRedisRestart(t *testing.T) {
	sub := fresh()
	a, b := node(t, ma, sub, "node-a", time.Hour), node(t, mb, sub, "node-b", time.Hour)
	before := storetest.Write(t, storetest.Pair{}, a, "snapshots/before", 4<<20)
	if _, err := a.Commit(ctx, before.Key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, before.Key, 60*time.Second)
	dir, release, err := b.Open(ctx, before.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	vol.RestartRedis()
	before.Check(t, dir)
	after := storetest.Write(t, storetest.Pair{}, a, "snapshots/after", 4<<20)
	if _, err := a.Commit(ctx, after.Key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, after.Key, 60*time.Second)
	dir2, release2, err := b.Open(ctx, after.Key)
	if err != nil {
		t.Fatalf("node B's Open after the Redis restart: %v", err)
	}
	defer release2()
	after.Check(t, dir2)
}

// TestTamperedThroughTheVolume: a byte of a committed snapshot changed
// through another node's mount makes every node refuse it: its layout
// (the objects the client lists) no longer matches the signed one and its
// content confirms the change. Opening an untouched snapshot checks the
// layout only; the log gives both times beside a full content check.
func TestTamperedThroughTheVolume(t *testing.T) {
	sub := fresh()
	a, b := node(t, ma, sub, "node-a", time.Hour), node(t, mb, sub, "node-b", time.Hour)
	key := "snapshots/tampered"
	storetest.Write(t, storetest.Pair{}, a, key, 64<<20)
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, key, 60*time.Second)
	start := time.Now()
	_, release, err := b.Open(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	release()
	layoutOnly := time.Since(start)
	content := nodeVerifyingContent(t, mb, sub)
	start = time.Now()
	if _, release, err = content.Open(ctx, key); err != nil {
		t.Fatal(err)
	}
	release()
	t.Logf("node B's first Open of 64 MiB: layout check %v, content check %v", layoutOnly, time.Since(start))
	f, err := os.OpenFile(filepath.Join(mb.Dir, sub, key, "memory"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tampered"), 12345); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for name, s := range map[string]*store.JuiceFS{"committer": a, "reader": b} {
		if _, _, err := s.Open(ctx, key); !errors.Is(err, store.ErrIntegrity) {
			t.Fatalf("%s's Open of the tampered snapshot = %v, want ErrIntegrity", name, err)
		}
	}
}

func nodeVerifyingContent(t *testing.T, m *juicefs.Mount, sub string) *store.JuiceFS {
	s, err := store.NewJuiceFS(store.JuiceFSConfig{MountDir: filepath.Join(m.Dir, sub), StagingDir: m.StagingDir,
		Node: "node-b2", Keys: keys(t), VerifyContent: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPlantedControlFile: a writer of the volume who puts an ordinary
// ".jfs.control" (with a forged, empty answer) next to a snapshot before
// its Commit does not get to answer for the client: the objects still
// come from the client's own control file, so a byte the writer then
// changes is caught (with the forged answer, every layout would have read
// empty at Commit and at Open alike, and matched).
func TestPlantedControlFile(t *testing.T) {
	sub := fresh()
	a := node(t, ma, sub, "node-a", time.Hour)
	key := "snapshots/planted"
	storetest.Write(t, storetest.Pair{}, a, key, 4<<20)
	// The agent's 19-byte request overwrites the file's start; it then
	// reads on from there.
	forged := strings.Repeat("x", 19) + "\xff\x00\x00\x00\x0e" + `{"Objects":[]}`
	if err := os.WriteFile(filepath.Join(mb.Dir, sub, key, ".jfs.control"), []byte(forged), 0o666); err != nil {
		t.Fatal(err)
	}
	objs, err := store.JuiceFSObjects(ctx, filepath.Join(ma.Dir, sub, key, "memory"))
	if err != nil || len(objs) == 0 {
		t.Fatalf("objects of memory beside a planted control file = %v, %v; want the client's", objs, err)
	}
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, key, 60*time.Second)
	f, err := os.OpenFile(filepath.Join(mb.Dir, sub, key, "memory"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tampered"), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, _, err := node(t, mb, sub, "node-b", time.Hour).Open(ctx, key); !errors.Is(err, store.ErrIntegrity) {
		t.Fatalf("Open of a snapshot changed beside a planted control file = %v, want ErrIntegrity", err)
	}
}

package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// objects are the store's objects of a data key in MinIO.
func objects(t *testing.T, key string) []string {
	return s3().Objects(t, s3().Bucket, key+"/")
}

// TestSnapshotToS3: a snapshot is Ready once on its node's disk, its
// remote status goes InProgress → Ready as the upload finishes, MinIO
// holds its files, its completion marker and the base disk, and a
// sandbox restored from it has the state it was taken with.
func TestSnapshotToS3(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	src := sbxtest.Create(t, k, "small", "s3-src")["s3-src"]
	sbxtest.EnvdRun(t, k, src, sbxtest.WriteState)
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "s3-src-1", Namespace: "default"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "s3-src"}}}
	if err := k.Create(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), snap) })
	seen := sbxtest.RemoteSequence(t, k, snap, 3*time.Minute)
	if !slices.Equal(seen, []sandlotv1.RemoteStatus{sandlotv1.RemoteInProgress, sandlotv1.RemoteReady}) {
		t.Fatalf("remote statuses %v, want InProgress then Ready", seen)
	}
	st := snap.Status
	if st.Phase != sandlotv1.DataReady || st.RemoteReadyTime == nil || len(st.BaseDiskSHA256) != 64 ||
		!meta.IsStatusConditionTrue(st.Conditions, sandlotv1.ConditionRemoteReady) {
		t.Fatalf("snapshot status %+v", st)
	}
	// The sandbox restored its template's base: its snapshot holds the
	// pages it changed (memory.layer) over the base's memory, which MinIO
	// must hold too.
	files := objects(t, "snapshots/"+string(snap.UID))
	for _, want := range []string{"manifest.json", "state", "disk.raw", "memory.layer", ".complete"} {
		if !slices.ContainsFunc(files, func(o string) bool { return strings.HasSuffix(o, "/"+want) }) {
			t.Fatalf("MinIO has %v for the snapshot, no %s", files, want)
		}
	}
	base := &sandlotv1.Snapshot{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: src.Status.BaseSnapshot}, base); err != nil {
		t.Fatalf("base snapshot %q: %v", src.Status.BaseSnapshot, err)
	}
	if baseFiles := objects(t, "snapshots/"+string(base.UID)); !slices.ContainsFunc(baseFiles, func(o string) bool { return strings.HasSuffix(o, "/memory") }) {
		t.Fatalf("MinIO has %v for the base snapshot %s the snapshot depends on, no memory", baseFiles, base.Name)
	}
	if disk := objects(t, "disks/"+st.BaseDiskSHA256); len(disk) != 3 {
		t.Fatalf("MinIO has %v for the base disk %s, want the disk, its sha256 and the marker", disk, st.BaseDiskSHA256)
	}
	child := sbxtest.FromSnapshot(t, k, "s3-child", snap.Name)
	if got := sbxtest.EnvdRun(t, k, child, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("restored sandbox has %q", got)
	}
}

// TestPauseResumeSameNode: with the s3 store, pause writes the package
// (pod gone, PausedSandbox Ready, Sandbox Paused) and resume restores it
// on the node it was paused on: same sandbox ID, state intact.
func TestPauseResumeSameNode(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	sbx := sbxtest.Create(t, k, "small", "napper")["napper"]
	sbxtest.EnvdRun(t, k, sbx, sbxtest.WriteState)
	ps := sbxtest.Pause(t, k, sbx.Name)
	if ps.Status.NodeName != sbx.Status.NodeName {
		t.Fatalf("package made on %s, the sandbox ran on %s", ps.Status.NodeName, sbx.Status.NodeName)
	}
	sbxtest.SetPaused(t, k, sbx.Name, false)
	resumed := sbxtest.WaitRunning(t, k, sbx.Name)
	if resumed.Status.SandboxID != sbx.Status.SandboxID || resumed.Status.NodeName != sbx.Status.NodeName {
		t.Fatalf("resumed as %s on %s, was %s on %s", resumed.Status.SandboxID, resumed.Status.NodeName,
			sbx.Status.SandboxID, sbx.Status.NodeName)
	}
	if got := sbxtest.EnvdRun(t, k, resumed, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("resumed sandbox has %q", got)
	}
	waitGone(t, k, ps)
}

func waitGone(t *testing.T, k client.Client, o client.Object) {
	t.Helper()
	poll.Eventually(t, time.Minute, o.GetName()+" released", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// TestResumeOnAnotherNode: a sandbox paused on node A, with A cordoned,
// is not placed on B while its package is only on A (MinIO is down, the
// upload retries), nor while B's fingerprint differs; once the package
// is remote Ready and B compatible, it resumes on B from bytes B fetched
// from MinIO (B's cache held nothing of it; MinIO answered the GETs),
// with the same sandbox ID and its state intact.
func TestResumeOnAnotherNode(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	sbx := sbxtest.Create(t, k, "small", "traveller")["traveller"]
	a, b := sbx.Status.NodeName, sbxtest.OtherNode(c, sbx.Status.NodeName)
	sbxtest.EnvdRun(t, k, sbx, sbxtest.WriteState)

	s3().Stop()
	t.Cleanup(ensureMinIO) // a failed test must not leave MinIO down for the next
	ps := sbxtest.Pause(t, k, sbx.Name)
	if ps.Status.RemoteStatus != sandlotv1.RemoteInProgress {
		t.Fatalf("with MinIO down the package is remote %q", ps.Status.RemoteStatus)
	}
	sbxtest.Cordon(t, k, a, true)
	t.Cleanup(func() { sbxtest.Cordon(t, k, a, false) })
	label := setFingerprint(t, k, b, "incompatible")
	t.Cleanup(func() { setFingerprint(t, k, b, label) })
	sbxtest.SetPaused(t, k, sbx.Name, false)
	stayUnplaced(t, k, sbx.Name, 8*time.Second, "its package is only on "+a)

	s3().Restart()
	sbxtest.WaitData(t, k, ps, 2*time.Minute, "remote Ready", sbxtest.RemoteReady)
	stayUnplaced(t, k, sbx.Name, 5*time.Second, b+"'s fingerprint differs")

	key := "paused/" + string(ps.UID)
	cacheB := filepath.Join(nodeNamed(b).StoreDir(), key)
	if _, err := os.Stat(cacheB); !os.IsNotExist(err) {
		t.Fatalf("%s's cache has the package before the resume (%v)", b, err)
	}
	files := objects(t, key) // listed now: the package goes once resumed
	getsBefore := s3().Requests(t, "GetObject")
	setFingerprint(t, k, b, label)
	resumed := sbxtest.WaitRunning(t, k, sbx.Name)
	if resumed.Status.NodeName != b || resumed.Status.SandboxID != sbx.Status.SandboxID {
		t.Fatalf("resumed as %s on %s, want %s on %s", resumed.Status.SandboxID, resumed.Status.NodeName, sbx.Status.SandboxID, b)
	}
	if got := sbxtest.EnvdRun(t, k, resumed, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("resumed sandbox has %q", got)
	}
	gets := s3().Requests(t, "GetObject") - getsBefore
	if _, err := os.Stat(filepath.Join(cacheB, "manifest.json")); err != nil || gets < len(files) {
		t.Fatalf("%s's cache: %v; MinIO answered %d GETs for the %d objects of the package", b, err, gets, len(files))
	}
	t.Logf("resumed on %s: MinIO answered %d GETs (the package is %d objects)", b, gets, len(files))
	waitGone(t, k, ps)
}

func ensureMinIO() {
	if !s3().Running() {
		s3().Restart()
	}
}

func nodeNamed(name string) *cluster.Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	panic("no node " + name)
}

// setFingerprint sets a node's fingerprint label and returns the old one.
func setFingerprint(t *testing.T, k client.Client, node, value string) string {
	t.Helper()
	var n corev1.Node
	if err := k.Get(context.Background(), client.ObjectKey{Name: node}, &n); err != nil {
		t.Fatal(err)
	}
	old := n.Labels[sandlotv1.LabelFingerprint]
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, sandlotv1.LabelFingerprint, value)))
	if err := k.Patch(context.Background(), &n, patch); err != nil {
		t.Fatal(err)
	}
	return old
}

// stayUnplaced checks for a while that a sandbox gets no node and no pod.
func stayUnplaced(t *testing.T, k client.Client, name string, d time.Duration, why string) {
	t.Helper()
	key := client.ObjectKey{Namespace: "default", Name: name}
	poll.Consistently(t, d, name+" unplaced as "+why, func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), key, &s); err != nil {
			t.Fatal(err)
		}
		if s.Status.NodeName != "" {
			return fmt.Errorf("placed on %s (%s)", s.Status.NodeName, s.Status.Message)
		}
		if err := sbxtest.PodsGone(context.Background(), k, "default", name, s.Status.PodName); err != nil {
			return fmt.Errorf("a pod exists: %w", err)
		}
		return nil
	})
	var s sandlotv1.Sandbox
	_ = k.Get(context.Background(), key, &s)
	t.Logf("unplaced for %v as %s: %s: %s", d, why, s.Status.Reason, s.Status.Message)
}

// waitShimIdle waits, as the restarted agent does, until a sandbox's shim
// has no snapshot under way (it completes one whose caller died): Stats
// waits for the VM's lock, which a snapshot holds to its end.
func waitShimIdle(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox) {
	t.Helper()
	pod := sbxtest.PodOf(t, k, sbx)
	socket := node.Layout{Root: nodeNamed(sbx.Status.NodeName).SandlotRoot}.ControlSocket(string(pod.UID))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := controlapi.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Stats(ctx, &controlapi.StatsRequest{}); err != nil {
		t.Fatalf("shim of %s: Stats (the end of its snapshot under way): %v", sbx.Name, err)
	}
}

// TestAgentKilledDuringSnapshots: the agent dies while five snapshots of
// a sandbox are under way; after its restart each ends Ready — and then
// restores, with the state it was taken with, and reaches MinIO — or
// Failed with nothing of it left, never a half-written Ready. (The shim
// completes the snapshot it had begun, which the restarted agent verifies
// and commits; those queued behind it are dropped with their caller.)
func TestAgentKilledDuringSnapshots(t *testing.T) {
	k := sbxtest.Client(t, c)
	ctx := context.Background()
	sbxtest.Template(t, k, "small")
	src := sbxtest.Create(t, k, "small", "victim")["victim"]
	sbxtest.EnvdRun(t, k, src, sbxtest.WriteState)
	snaps := make([]*sandlotv1.Snapshot, 5)
	for i := range snaps {
		snaps[i] = &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("victim-%d", i), Namespace: "default"},
			Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "victim"}}}
		if err := k.Create(ctx, snaps[i]); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.Delete(context.Background(), snaps[i]) })
	}
	node := src.Status.NodeName
	sbxtest.WaitData(t, k, snaps[0], time.Minute, "Creating", func(st *sandlotv1.DataStatus) error {
		if st.Phase != sandlotv1.DataCreating {
			return fmt.Errorf("phase %q", st.Phase)
		}
		return nil
	})
	start := sbxtest.StopAgents(t, c, node)
	waitShimIdle(t, k, src) // the restarted agent then finds the snapshot the shim completed
	start()
	var ready []*sandlotv1.Snapshot
	for _, s := range snaps {
		sbxtest.WaitData(t, k, s, 3*time.Minute, "final", func(st *sandlotv1.DataStatus) error {
			if st.Phase == sandlotv1.DataFailed || (st.Phase == sandlotv1.DataReady && st.RemoteStatus == sandlotv1.RemoteReady) {
				return nil
			}
			return fmt.Errorf("phase %q, remote %q", st.Phase, st.RemoteStatus)
		})
		cond := meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionReady)
		t.Logf("%s: %s (%s: %s)", s.Name, s.Status.Phase, cond.Reason, cond.Message)
		key := "snapshots/" + string(s.UID)
		if s.Status.Phase == sandlotv1.DataReady {
			ready = append(ready, s)
		} else if _, err := os.Stat(filepath.Join(nodeNamed(node).StoreDir(), key)); !os.IsNotExist(err) || len(objects(t, key)) > 0 {
			t.Errorf("%s Failed but left data: %v, MinIO %v", s.Name, err, objects(t, key))
		}
	}
	if len(ready) == 0 {
		t.Fatal("no snapshot Ready: those not yet begun when the agent died must be taken after its restart")
	}
	for i, s := range ready {
		name := fmt.Sprintf("victim-child-%d", i)
		child := sbxtest.FromSnapshot(t, k, name, s.Name)
		if got := sbxtest.EnvdRun(t, k, child, sbxtest.ReadState); got != sbxtest.WantState {
			t.Errorf("restored from %s: %q", s.Name, got)
		}
		sbxtest.Delete(t, k, name) // one at a time: 2 cores under TCG
	}
}

// TestMinIODownDuringUpload: with MinIO stopped the snapshot is Ready on
// its node at once and its upload retries with backoff (remote
// InProgress, the condition saying why) until the deadline, then remote
// Failed; nothing is deleted and the sandbox runs on.
func TestMinIODownDuringUpload(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	src := sbxtest.Create(t, k, "small", "offline")["offline"]
	sbxtest.EnvdRun(t, k, src, sbxtest.WriteState)
	s3().Stop()
	t.Cleanup(ensureMinIO)
	snap := sbxtest.Snapshot(t, k, "offline-1", "offline")
	if snap.Status.RemoteStatus != sandlotv1.RemoteInProgress {
		t.Fatalf("remote %s with MinIO down", snap.Status.RemoteStatus)
	}
	sbxtest.WaitData(t, k, snap, 20*time.Second, "retrying", func(st *sandlotv1.DataStatus) error {
		cond := meta.FindStatusCondition(st.Conditions, sandlotv1.ConditionRemoteReady)
		if cond == nil || !strings.Contains(strings.ToLower(cond.Message), "retry") {
			return fmt.Errorf("RemoteReady condition %+v", cond)
		}
		return nil
	})
	start := time.Now()
	seen := sbxtest.RemoteSequence(t, k, snap, 2*time.Minute)
	if seen[len(seen)-1] != sandlotv1.RemoteFailed {
		t.Fatalf("remote statuses %v with MinIO down, want Failed last", seen)
	}
	t.Logf("remote Failed %v after the retries began: %s", time.Since(start).Round(time.Second),
		meta.FindStatusCondition(snap.Status.Conditions, sandlotv1.ConditionRemoteReady).Message)
	if snap.Status.Phase != sandlotv1.DataReady {
		t.Fatalf("phase %s after the upload failed", snap.Status.Phase)
	}
	if _, err := os.Stat(filepath.Join(snap.Status.Location, "manifest.json")); err != nil {
		t.Fatalf("local data gone after the upload failed: %v", err)
	}
	if got := sbxtest.EnvdRun(t, k, src, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("sandbox has %q after the failed upload", got)
	}
	child := sbxtest.FromSnapshot(t, k, "offline-child", snap.Name) // still restorable on its node
	if child.Status.NodeName != snap.Status.NodeName {
		t.Fatalf("restored on %s, the data is only on %s", child.Status.NodeName, snap.Status.NodeName)
	}
}

// TestDeleteHeldWhileRestoring: deleting a Snapshot a Sandbox restores
// from waits (DeletionHeld, data kept) until that Sandbox is gone; then
// its data leaves the node and MinIO.
func TestDeleteHeldWhileRestoring(t *testing.T) {
	k := sbxtest.Client(t, c)
	ctx := context.Background()
	sbxtest.Template(t, k, "small")
	sbxtest.Create(t, k, "small", "origin")
	snap := sbxtest.Snapshot(t, k, "origin-1", "origin")
	sbxtest.RemoteSequence(t, k, snap, 2*time.Minute)
	sbxtest.FromSnapshot(t, k, "user", snap.Name)
	if err := k.Delete(ctx, snap); err != nil {
		t.Fatal(err)
	}
	key := "snapshots/" + string(snap.UID)
	sbxtest.WaitData(t, k, snap, 30*time.Second, "DeletionHeld", func(st *sandlotv1.DataStatus) error {
		if !meta.IsStatusConditionTrue(st.Conditions, sandlotv1.ConditionDeletionHeld) {
			return fmt.Errorf("conditions %+v", st.Conditions)
		}
		return nil
	})
	poll.Consistently(t, 3*time.Second, "snapshot and data kept while a sandbox restores from it", func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(snap), &sandlotv1.Snapshot{}); err != nil {
			return fmt.Errorf("snapshot gone: %v", err)
		}
		if _, err := os.Stat(filepath.Join(snap.Status.Location, "manifest.json")); err != nil {
			return fmt.Errorf("local data removed: %v", err)
		}
		if o := objects(t, key); len(o) == 0 {
			return fmt.Errorf("MinIO has nothing of it")
		}
		return nil
	})
	sbxtest.Delete(t, k, "user")
	waitGone(t, k, snap)
	poll.Eventually(t, 30*time.Second, "data gone", func() error {
		if _, err := os.Stat(snap.Status.Location); !os.IsNotExist(err) {
			return fmt.Errorf("local data: %v", err)
		}
		if o := objects(t, key); len(o) > 0 {
			return fmt.Errorf("MinIO still has %v", o)
		}
		return nil
	})
}

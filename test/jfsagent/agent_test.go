package jfsagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/juicefs"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// inBucket checks every object of every file of a store key (as its
// client lists them) is in MinIO, and returns how many there are.
func inBucket(t *testing.T, mount mount, key string) int {
	t.Helper()
	have := map[string]bool{}
	for _, o := range c.MinIOServer.Objects(t, c.JuiceFSVolume.Bucket, juicefs.VolumeName+"/chunks/") {
		have[o] = true
	}
	n := 0
	err := filepath.WalkDir(filepath.Join(mount.Dir, key), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		objs, err := store.JuiceFSObjects(context.Background(), p)
		for _, o := range objs {
			if o.Key != "" && !have[o.Key] {
				return fmt.Errorf("%s: object %s not in the bucket", p, o.Key)
			}
			n++
		}
		return err
	})
	if err != nil || n == 0 {
		t.Fatalf("%s in the bucket: %v (%d objects)", key, err, n)
	}
	return n
}

// TestSnapshotToJuiceFS: a snapshot is Ready once on its node; its
// remote status is InProgress while its node's client cannot upload its
// blocks (MinIO down: the blocks of a small snapshot otherwise leave
// staging within the agent's first check) and Ready once it has; every
// object of its files (and of the base it builds on) is in MinIO by then,
// and a sandbox restored from it has the state it was taken with.
func TestSnapshotToJuiceFS(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	src := sbxtest.Create(t, k, "small", "jfs-src")["jfs-src"]
	sbxtest.EnvdRun(t, k, src, sbxtest.WriteState)
	s3 := c.MinIOServer
	s3.Stop()
	t.Cleanup(func() {
		if !s3.Running() {
			s3.Restart()
		}
	})
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "jfs-src-1", Namespace: "default"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "jfs-src"}}}
	if err := k.Create(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), snap) })
	sbxtest.WaitData(t, k, snap, 2*time.Minute, "remote InProgress with MinIO down", func(st *sandlotv1.DataStatus) error {
		if st.RemoteStatus != sandlotv1.RemoteInProgress {
			return fmt.Errorf("remote %q", st.RemoteStatus)
		}
		return nil
	})
	s3.Restart()
	seen := sbxtest.RemoteSequence(t, k, snap, 3*time.Minute)
	if !slices.Equal(seen, []sandlotv1.RemoteStatus{sandlotv1.RemoteInProgress, sandlotv1.RemoteReady}) {
		t.Fatalf("remote statuses %v, want InProgress then Ready", seen)
	}
	m := mountOf(t, src.Status.NodeName)
	n := inBucket(t, m, "snapshots/"+string(snap.UID))
	checkPausedBriefly(t, k, snap)
	base := &sandlotv1.Snapshot{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: src.Status.BaseSnapshot}, base); err != nil {
		t.Fatal(err)
	}
	nb := inBucket(t, m, "snapshots/"+string(base.UID))
	t.Logf("snapshot Ready with its %d objects and its base's %d in MinIO", n, nb)
	child := sbxtest.FromSnapshot(t, k, "jfs-child", snap.Name)
	if got := sbxtest.EnvdRun(t, k, child, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("restored sandbox has %q", got)
	}
}

// TestResumeOnAnotherNode: paused on node A, resumed on B (A cordoned)
// with the same sandbox ID and state, its memory opened in place on B's
// JuiceFS mount: B's client fetches from MinIO the blocks the restore
// reads, fewer bytes than the package and its bases hold (no full
// download first).
func TestResumeOnAnotherNode(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	sbx := sbxtest.Create(t, k, "small", "jfs-traveller")["jfs-traveller"]
	a, b := sbx.Status.NodeName, sbxtest.OtherNode(c, sbx.Status.NodeName)
	sbxtest.EnvdRun(t, k, sbx, sbxtest.WriteState)
	ps := sbxtest.Pause(t, k, sbx.Name)
	sbxtest.WaitData(t, k, ps, 2*time.Minute, "remote Ready", sbxtest.RemoteReady)
	sbxtest.Cordon(t, k, a, true)
	t.Cleanup(func() { sbxtest.Cordon(t, k, a, false) })
	mb, s3 := mountOf(t, b), c.MinIOServer
	held := heldBytes(t, k, mb, ps, sbx) // the package goes once resumed
	getsBefore := s3.Requests(t, "GetObject")
	bytesBefore, err := mb.Metric("juicefs_object_request_data_bytes", `method="GET"`)
	if err != nil {
		bytesBefore = 0 // no GET yet: the counter appears with the first
	}
	sbxtest.SetPaused(t, k, sbx.Name, false)
	resumed := sbxtest.WaitRunning(t, k, sbx.Name)
	if resumed.Status.NodeName != b || resumed.Status.SandboxID != sbx.Status.SandboxID {
		t.Fatalf("resumed as %s on %s, want %s on %s", resumed.Status.SandboxID, resumed.Status.NodeName, sbx.Status.SandboxID, b)
	}
	if got := sbxtest.EnvdRun(t, k, resumed, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("resumed sandbox has %q", got)
	}
	checkMemoryOnMount(t, k, resumed, mb)
	gets := s3.Requests(t, "GetObject") - getsBefore
	got, err := mb.Metric("juicefs_object_request_data_bytes", `method="GET"`)
	if err != nil || gets == 0 || got <= bytesBefore {
		t.Fatalf("%s's client fetched %.0f bytes (%v), MinIO answered %d GETs: want the package's blocks from MinIO", b, got-bytesBefore, err, gets)
	}
	if got-bytesBefore >= float64(held) {
		t.Fatalf("%s's client fetched %.0f bytes, all %d the package and its bases hold: want pages on demand, not a full download", b, got-bytesBefore, held)
	}
	t.Logf("resumed on %s: its client fetched %.1f MiB in %d GETs; the package and what it builds on hold %.1f MiB in objects",
		b, (got-bytesBefore)/(1<<20), gets, float64(held)/(1<<20))
}

// heldBytes sums the objects of a pause package and of the base snapshot
// and base disk it builds on, per file (logged).
func heldBytes(t *testing.T, k client.Client, m mount, ps *sandlotv1.PausedSandbox, sbx *sandlotv1.Sandbox) int64 {
	t.Helper()
	base := &sandlotv1.Snapshot{}
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: sbx.Status.BaseSnapshot}, base); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, key := range []string{"paused/" + string(ps.UID), "snapshots/" + string(base.UID), "disks/" + ps.Status.BaseDiskSHA256} {
		err := filepath.WalkDir(filepath.Join(m.Dir, key), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			objs, err := store.JuiceFSObjects(context.Background(), p)
			seen, n := map[string]bool{}, int64(0)
			for _, o := range objs {
				if o.Key != "" && !seen[o.Key] {
					seen[o.Key], n = true, n+int64(o.Size)
				}
			}
			t.Logf("%s/%s: %.1f MiB in %d objects", key, d.Name(), float64(n)/(1<<20), len(seen))
			total += n
			return err
		})
		if err != nil {
			t.Fatalf("objects of %s: %v", key, err)
		}
	}
	return total
}

// checkMemoryOnMount: the sandbox's QEMU maps its memory from a file on
// the node's JuiceFS mount, not from a copy.
func checkMemoryOnMount(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox, m mount) {
	t.Helper()
	pod := sbxtest.PodOf(t, k, sbx)
	_, args, ok := sbxtest.FindQEMU(string(pod.UID))
	if !ok {
		t.Fatalf("no QEMU for pod %s", pod.UID)
	}
	for _, a := range args {
		if strings.Contains(a, "mem-path="+m.Dir+"/") {
			return
		}
	}
	t.Fatalf("QEMU of %s maps no memory from %s: %q", sbx.Name, m.Dir, args)
}

// touchMemory makes the guest fault in 96 MiB it had not touched: pages a
// restored VM reads from its memory file on the volume.
const touchMemory = `python3 -c "b = bytearray(96 << 20); print(sum(b[::4096]), len(b) >> 20)"`

// TestRedisAndAgentsRestart: with sandboxes running whose memory is mapped
// from files on the nodes' JuiceFS CSI mounts, the metadata engine
// restarts and then each node's agent pod is replaced (deleted; the
// DaemonSet makes a new one): the VMs keep running (the same QEMUs, their
// memory still readable from the volume: the sandlot-store pods hold it
// published), and a snapshot taken afterwards becomes remote Ready and
// restores with its state.
func TestRedisAndAgentsRestart(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, "small")
	sbxs := sbxtest.Create(t, k, "small", "jfs-steady-0", "jfs-steady-1")
	pids := map[string]int{}
	for _, s := range sbxs {
		sbxtest.EnvdRun(t, k, s, sbxtest.WriteState)
		checkMemoryOnMount(t, k, s, mountOf(t, s.Status.NodeName))
		pids[s.Name] = qemuPID(t, k, s)
	}
	c.JuiceFSVolume.RestartRedis()
	// The first node's agent pod is replaced (an upgrade), the second's
	// process killed (a crash: the kubelet restarts its container).
	if err := c.ReplaceAgentPod(c.Nodes[0].Name); err != nil {
		t.Fatal(err)
	}
	if err := c.KillAgent(c.Nodes[1].Name); err != nil {
		t.Fatal(err)
	}
	for _, s := range sbxs {
		if got := sbxtest.EnvdRun(t, k, s, sbxtest.ReadState); got != sbxtest.WantState {
			t.Fatalf("%s after the restarts has %q", s.Name, got)
		}
		if got := sbxtest.EnvdRun(t, k, s, touchMemory); got != "0 96\n" {
			t.Fatalf("%s touching fresh memory after the restarts: %q", s.Name, got)
		}
		if pid := qemuPID(t, k, s); pid != pids[s.Name] {
			t.Fatalf("%s's QEMU is pid %d, was %d: the VM was restarted", s.Name, pid, pids[s.Name])
		}
	}
	snap := sbxtest.Snapshot(t, k, "jfs-after-restarts", "jfs-steady-0")
	sbxtest.WaitData(t, k, snap, 3*time.Minute, "remote Ready", sbxtest.RemoteReady)
	child := sbxtest.FromSnapshot(t, k, "jfs-after-child", snap.Name)
	if got := sbxtest.EnvdRun(t, k, child, sbxtest.ReadState); got != sbxtest.WantState {
		t.Fatalf("restored sandbox has %q", got)
	}
}

func qemuPID(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox) int {
	t.Helper()
	pod := sbxtest.PodOf(t, k, sbx)
	pid, _, ok := sbxtest.FindQEMU(string(pod.UID))
	if !ok {
		t.Fatalf("no QEMU for %s", sbx.Name)
	}
	return pid
}

// checkPausedBriefly: the VM was paused only while its files were written
// on the node (they go into the volume after it runs again): written
// through FUSE while paused, an idle VM's took 0.8-1 s.
func checkPausedBriefly(t *testing.T, k client.Client, snap *sandlotv1.Snapshot) {
	t.Helper()
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(snap), snap); err != nil {
		t.Fatal(err)
	}
	paused := time.Duration(snap.Status.SourcePausedMicroseconds) * time.Microsecond
	if paused <= 0 || paused > 400*time.Millisecond {
		t.Fatalf("snapshot %s paused its VM %v: want its files written on the node while paused, not through FUSE", snap.Name, paused)
	}
	t.Logf("snapshot %s paused its VM %v", snap.Name, paused)
}

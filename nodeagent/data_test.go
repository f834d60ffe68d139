package nodeagent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// runningSandbox is a Sandbox the controller placed on the agent's node
// and its running pod, with a fake VM that runs.
func (a *agent) runningSandbox(name, id string) (*sandlotv1.Sandbox, *corev1.Pod, *fakeVM) {
	a.t.Helper()
	sbx := a.sandbox(name, id)
	pod, vm := a.pod(name, map[string]string{sandlotv1.LabelSandbox: name}, nil, corev1.PodRunning, "Running")
	return sbx, pod, vm
}

// snapshot creates a Snapshot of sandbox and plays the controller
// assigning it to the agent's node.
func (a *agent) snapshot(name string, sbx *sandlotv1.Sandbox) *sandlotv1.Snapshot {
	a.t.Helper()
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{sandlotv1.LabelNode: a.node}},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: sbx.Name}}}
	a.create(snap)
	a.setStatus(snap, func() {
		snap.Status.Phase, snap.Status.NodeName, snap.Status.SandboxID = sandlotv1.DataPending, a.node, sbx.Status.SandboxID
	})
	return snap
}

// waitData waits for the data phase of obj, which read reads afresh,
// and returns its status.
func (a *agent) waitData(obj client.Object, read func() *sandlotv1.DataStatus, phase sandlotv1.DataPhase) *sandlotv1.DataStatus {
	a.t.Helper()
	a.eventually(fmt.Sprintf("%T %s %s", obj, obj.GetName(), phase), func() error {
		if err := a.get(obj); err != nil {
			return err
		}
		if st := read(); st.Phase != phase {
			c := condition(st.Conditions, sandlotv1.ConditionReady)
			return fmt.Errorf("phase %q (Ready %s %s: %s)", st.Phase, c.Status, c.Reason, c.Message)
		}
		return nil
	})
	return read()
}

// waitSnapshot waits for a Snapshot's data phase.
func (a *agent) waitSnapshot(snap *sandlotv1.Snapshot, phase sandlotv1.DataPhase) *sandlotv1.DataStatus {
	a.t.Helper()
	return a.waitData(snap, func() *sandlotv1.DataStatus { return &snap.Status.DataStatus }, phase)
}

func storeKey(t *testing.T, kind string, obj metav1.Object) string {
	t.Helper()
	k, err := stageapi.Key(kind, string(obj.GetUID()))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSnapshotTakenIntoStore: the agent takes a Snapshot of a running
// sandbox through its shim straight into the store, holds it with the
// data finalizer, records where it is and what it holds, tells it in an
// Event, and removes the data when the Snapshot is deleted.
func TestSnapshotTakenIntoStore(t *testing.T) {
	a := startAgent(t, nil)
	sbx, _, vm := a.runningSandbox("snapped", "snappedsandbox000001")
	snap := a.snapshot("snapped-1", sbx)
	st := a.waitSnapshot(snap, sandlotv1.DataReady)

	dir := a.store.Dir(storeKey(t, "Snapshot", snap))
	if _, _, taken, _ := vm.calls(); !slices.Equal(taken, []string{dir}) {
		t.Fatalf("shim asked for snapshots into %v, want [%s]", taken, dir)
	}
	if st.Location != dir || st.RemoteStatus != sandlotv1.RemoteNotApplicable || st.TotalBytes == 0 ||
		st.Fingerprint.CPU != "fake-cpu" || st.CompletionTime == nil || st.ObservedGeneration != snap.Generation {
		t.Fatalf("status = %+v, want location %s, remote NotApplicable, the manifest's bytes and fingerprint", st, dir)
	}
	if err := hasCondition(st.Conditions, sandlotv1.ConditionReady, metav1.ConditionTrue, "Persisted"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(snap.Finalizers, sandlotv1.FinalizerData) {
		t.Fatalf("finalizers %v, want %s", snap.Finalizers, sandlotv1.FinalizerData)
	}
	if _, err := a.store.Status(context.Background(), storeKey(t, "Snapshot", snap)); err != nil {
		t.Fatalf("the data is not committed in the store: %v", err)
	}
	a.waitEvent(snap, corev1.EventTypeNormal, "Persisted", "Ready=True: data persisted on "+a.node)

	if err := a.c.Delete(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	a.eventually("snapshot and its data gone", func() error {
		if err := a.get(snap); !apierrors.IsNotFound(err) {
			return fmt.Errorf("snapshot still there (%v, finalizers %v)", err, snap.Finalizers)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("data dir still there (%v)", err)
		}
		return nil
	})
}

// TestSnapshotFailureIsAWarning: a snapshot the shim fails is Failed with
// the reason and the shim's error, and a Warning Event says so.
func TestSnapshotFailureIsAWarning(t *testing.T) {
	a := startAgent(t, nil)
	sbx, _, vm := a.runningSandbox("unsnapped", "unsnappedsandbox0001")
	vm.set(func(v *fakeVM) { v.snapshotErr = errors.New("migrate to file: no space left on device") })
	snap := a.snapshot("unsnapped-1", sbx)
	st := a.waitSnapshot(snap, sandlotv1.DataFailed)
	if err := hasCondition(st.Conditions, sandlotv1.ConditionReady, metav1.ConditionFalse, "SnapshotFailed"); err != nil {
		t.Fatal(err)
	}
	a.waitEvent(snap, corev1.EventTypeWarning, "SnapshotFailed", "no space left on device")
	a.noEvent(snap, "Persisted")
}

// remoteStore is the local store reporting the remote status the test
// sets: what a shared store (s3, juicefs) says while and after it uploads.
type remoteStore struct {
	*store.Local
	mu     sync.Mutex
	remote store.RemoteState
}

func (s *remoteStore) set(r store.RemoteState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remote = r
}

func (s *remoteStore) Status(ctx context.Context, key string) (store.Status, error) {
	st, err := s.Local.Status(ctx, key)
	if err != nil {
		return st, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Remote, st.Message = s.remote, "upload "+string(s.remote)
	if s.remote == store.RemoteReady {
		st.ReadyTime = time.Now()
	}
	return st, nil
}

// TestPausedSandboxRemoteStatus: a pause package is taken like a
// Snapshot; on a shared store its remote status follows the store's until
// final, and Ready is an Event (the steps of an upload are not).
func TestPausedSandboxRemoteStatus(t *testing.T) {
	local, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &remoteStore{Local: local, remote: store.RemoteInProgress}
	a := startAgent(t, st)
	const id = "pausedsandbox0000001"
	_, pod, _ := a.runningSandbox("paused", id)
	ps := &sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: "paused", Labels: map[string]string{sandlotv1.LabelNode: a.node}},
		Spec: sandlotv1.PausedSandboxSpec{SandboxID: id, NodeName: a.node, PodName: pod.Name,
			VM: sandlotv1.VMSpec{Image: "python:3.12", Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}}}}
	a.create(ps)
	a.setStatus(ps, func() { ps.Status.Phase, ps.Status.NodeName = sandlotv1.DataPending, a.node })
	read := func() *sandlotv1.DataStatus { return &ps.Status.DataStatus }
	data := a.waitData(ps, read, sandlotv1.DataReady)
	if data.RemoteStatus != sandlotv1.RemoteInProgress || data.Location != st.Dir(storeKey(t, "PausedSandbox", ps)) {
		t.Fatalf("status = %+v, want remote InProgress at the package's directory", data)
	}
	a.waitEvent(ps, corev1.EventTypeNormal, "Persisted", "Ready=True")

	st.set(store.RemoteReady)
	a.eventually("remote status Ready", func() error {
		if err := a.get(ps); err != nil {
			return err
		}
		if ps.Status.RemoteStatus != sandlotv1.RemoteReady || ps.Status.RemoteReadyTime == nil {
			return fmt.Errorf("remote status %q", ps.Status.RemoteStatus)
		}
		return hasCondition(ps.Status.Conditions, sandlotv1.ConditionRemoteReady, metav1.ConditionTrue, string(sandlotv1.RemoteReady))
	})
	a.waitEvent(ps, corev1.EventTypeNormal, string(sandlotv1.RemoteReady), "RemoteReady=True")
	a.noEvent(ps, string(sandlotv1.RemoteInProgress))
}

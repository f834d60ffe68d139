package nodeagent

import (
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// TestRestoreHolds: the store may evict a key only when no live pod on
// the node was restored from it or from data that builds on it, and no
// Snapshot of this node still waits for its remote status. A fake
// cache here; test/agent's TestCacheCapKeepsWhatSandboxesNeed runs
// the same hold against a real cluster and MinIO. (Over 60 lines: a
// table of cases.)
func TestRestoreHolds(t *testing.T) {
	local, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := &layout{store: local, shared: true}
	manifest := func(key, memory string) {
		t.Helper()
		dir := local.Dir(key)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		m := &snapshot.Manifest{Version: snapshot.ManifestVersion, State: snapshot.FileRef{Path: snapshot.StateFile},
			Disk: snapshot.FileRef{Path: snapshot.DiskFile}, Memory: snapshot.FileRef{Path: memory},
			BaseDisk: snapshot.FileRef{Path: "../../disks/d/" + baseDiskFile}}
		if err := m.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	// base <- snap (its VM was restored from base) ; other stands alone.
	manifest("snapshots/base", snapshot.MemoryFile)
	manifest("snapshots/snap", "../base/"+snapshot.MemoryFile)
	manifest("snapshots/other", snapshot.MemoryFile)

	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := sandlotv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	uploading := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "default", UID: "other"},
		Status: sandlotv1.SnapshotStatus{DataStatus: sandlotv1.DataStatus{RemoteStatus: sandlotv1.RemoteInProgress}}}
	uploaded := uploading.DeepCopy()
	uploaded.Status.RemoteStatus = sandlotv1.RemoteReady
	for _, tc := range []struct {
		name  string
		objs  []client.Object
		held  []string
		freed []string
	}{
		{"no pods", nil, nil, []string{"snapshots/base", "snapshots/snap", "disks/d"}},
		{"restored from snap", []client.Object{restoredPod(t, "a", "snap", corev1.PodRunning)},
			[]string{"snapshots/snap", "snapshots/base", "disks/d"}, []string{"snapshots/other"}},
		{"restored from base", []client.Object{restoredPod(t, "a", "base", corev1.PodPending)},
			[]string{"snapshots/base", "disks/d"}, []string{"snapshots/snap", "snapshots/other"}},
		{"its pod finished", []client.Object{restoredPod(t, "a", "snap", corev1.PodFailed)},
			nil, []string{"snapshots/snap", "snapshots/base"}},
		{"its Snapshot still uploading", []client.Object{uploading}, []string{"snapshots/other"}, []string{"snapshots/base"}},
		{"its Snapshot remote Ready", []client.Object{uploaded}, nil, []string{"snapshots/other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &restoreHolds{cache: fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objs...).Build(), layout: l}
			for _, k := range tc.held {
				if !h.held(k) {
					t.Errorf("%s not held, want held", k)
				}
			}
			for _, k := range tc.freed {
				if h.held(k) {
					t.Errorf("%s held, want it free to go", k)
				}
			}
		})
	}
}

// restoredPod is a pod whose VM was restored from Snapshot uid.
func restoredPod(t *testing.T, name, uid string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	ann, err := sandlotv1.VMAnnotations{SandboxID: "abcdefghij0123456789",
		Restore: &sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: uid, UID: uid, Location: "snapshots/" + uid}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
		Status: corev1.PodStatus{Phase: phase}}
}

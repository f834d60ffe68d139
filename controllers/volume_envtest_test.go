package controllers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestVolumeMounts: a sandbox mounting a Volume that is missing (or not
// Ready) waits with no pod, saying which; once the Volume is Ready its pod
// names the volume's UID and path to the shim, and a snapshot of it
// records the mount.
func TestVolumeMounts(t *testing.T) {
	h := withController(t, "vol-node", 512)
	sbx := newSandbox("mounts", sandlotv1.SandboxSource{Template: "python"})
	sbx.Spec.VolumeMounts = []sandlotv1.VolumeMount{{Name: "data_1", Path: "/mnt/data"}}
	h.create(sbx)
	h.eventually(10*time.Second, "VolumeNotReady", func() error {
		if s := h.sandbox("mounts"); s.Status.Reason != sandlotv1.ReasonVolumeNotReady || s.Status.Message != `volume "data_1" not found` {
			return errorf("status %s %s: %s", s.Status.Phase, s.Status.Reason, s.Status.Message)
		}
		return nil
	})
	h.consistently(time.Second, "no pod without its volume", func() error {
		if err := h.c.Get(context.Background(), h.key("mounts"), &corev1.Pod{}); err == nil {
			return errorf("a pod exists")
		}
		return nil
	})
	vol := &sandlotv1.Volume{ObjectMeta: metav1.ObjectMeta{Name: "vol-abc", Namespace: sbx.Namespace},
		Spec: sandlotv1.VolumeSpec{Name: "data_1"}}
	h.create(vol)
	vol.Status.Phase = sandlotv1.VolumeReady
	if err := h.c.Status().Update(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	h.eventually(15*time.Second, "the pod names the volume", func() error {
		pod := h.pod("mounts")
		var got []sandlotv1.PodVolume
		if err := json.Unmarshal([]byte(pod.Annotations[sandlotv1.AnnotationVolumes]), &got); err != nil {
			return err
		}
		if len(got) != 1 || got[0] != (sandlotv1.PodVolume{Name: "data_1", UID: string(vol.UID), Path: "/mnt/data"}) {
			return errorf("annotation %v", got)
		}
		return nil
	})
	h.setPod("mounts", corev1.PodRunning, "10.88.9.7")
	h.waitPhase("mounts", sandlotv1.SandboxRunning)
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "mounts-snap", Namespace: sbx.Namespace},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "mounts"}}}
	h.create(snap)
	h.eventually(10*time.Second, "the snapshot records the mount", func() error {
		if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(snap), snap); err != nil {
			return err
		}
		if m := snap.Status.VM.VolumeMounts; len(m) != 1 || m[0] != sbx.Spec.VolumeMounts[0] {
			return errorf("status.vm.volumeMounts %v", m)
		}
		return nil
	})
}

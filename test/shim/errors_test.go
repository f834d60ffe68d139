package shimtest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	"github.com/sandlot-dev/sandlot/api/snapshot"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/crienv"
)

// TestBadInput: what the shim cannot run is a clear CRI error, and the
// failed pod leaves nothing behind. containerd's CRI creates the task (the
// shim's Create) at StartContainer, so that is where the shim's refusals
// surface; an image without a command CRI refuses itself at CreateContainer.
func TestBadInput(t *testing.T) {
	e, img := startBusybox(t)
	other := "sandlot.test/other:1"
	e.ImportImage(t, other, crienv.Image{Cmd: busybox.Cmd, Files: map[string]crienv.File{"/etc/other": {Data: []byte("x")}}})
	e.ImportImage(t, "sandlot.test/nocmd:1", crienv.Image{})
	pod, _, _, cfg := e.running(t, "origin", img, nil)
	snap := filepath.Join(e.Dir, "snap")
	if _, err := e.Control(t, cfg.Metadata.Uid).Snapshot(context.Background(), &controlapi.SnapshotRequest{Dir: snap}); err != nil {
		t.Fatal(err)
	}
	e.RemovePod(t, pod)
	alienQEMU := foreignSnapshot(t, snap, filepath.Join(e.Dir, "qemu"), "qemuVersion", "QEMU emulator version 99.0.0")
	alienCPU := foreignSnapshot(t, snap, filepath.Join(e.Dir, "cpu"), "cpuFingerprint", "GenuineIntel/6/143/sapphirerapids")

	cases := []struct {
		name, image string
		ann         map[string]string
		want        string
	}{
		{"unknown snapshot", img, RestoreAnnotations("/nonexistent/snapshot"), "unknown snapshot"},
		{"snapshot from another QEMU", img, RestoreAnnotations(alienQEMU), "QEMU"},
		{"snapshot from another CPU", img, RestoreAnnotations(alienCPU), "CPU"},
		{"more memory than the node has", img, map[string]string{sandlotv1.AnnotationMemoryMiB: "200000"}, "the node has"},
		{"memory above the API's bound", img, map[string]string{sandlotv1.AnnotationMemoryMiB: "900000"}, "[64, 262144]"},
		{"bad vCPU annotation", img, map[string]string{sandlotv1.AnnotationVCPU: "many"}, sandlotv1.AnnotationVCPU},
		{"image without a command", "sandlot.test/nocmd:1", nil, "command"},
		{"image differs from the snapshot's", other, RestoreAnnotations(snap), "was taken from image"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod, cfg := e.RunPod(t, "bad"+string(rune('a'+i)), Handler, tc.ann)
			defer e.RemovePod(t, pod)
			c := crienv.ContainerConfig(cfg, "sandbox", tc.image, nil)
			err := createStart(e, pod, cfg, c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CreateContainer: %v, want an error saying %q", err, tc.want)
			}
			t.Logf("%v", err)
		})
	}
	e.WaitNoLeftovers(t)
}

// foreignSnapshot copies a snapshot and changes one manifest field, as a
// snapshot from another kind of node would have it.
func foreignSnapshot(t *testing.T, src, dst, key, value string) string {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	path := filepath.Join(dst, snapshot.ManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = value
	b, _ = json.Marshal(m)
	_ = os.Chmod(path, 0o600)
	if err := os.WriteFile(path, b, 0o400); err != nil {
		t.Fatal(err)
	}
	return dst
}

// createStart is CRI's CreateContainer then StartContainer; it returns the
// first error.
func createStart(e *Env, pod string, cfg *runtimeapi.PodSandboxConfig, c *runtimeapi.ContainerConfig) error {
	ctx := context.Background()
	created, err := e.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: c, SandboxConfig: cfg})
	if err != nil {
		return err
	}
	_, err = e.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId})
	return err
}

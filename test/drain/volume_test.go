package drain

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// volume is the E2B volume sandbox "mounted" mounts at /mnt/vol, made as
// a user would with kubectl (sandlot-api's sweep makes its directory).
var volume = &sandlotv1.Volume{ObjectMeta: metav1.ObjectMeta{Name: "vol-drain", Namespace: "default"},
	Spec: sandlotv1.VolumeSpec{Name: "shared"}}

// mounted starts sandbox "mounted" of tpl with the volume, once Ready,
// and writes a file to it from the guest.
func mounted(t *testing.T, k client.Client, tpl string) *sandlotv1.Sandbox {
	t.Helper()
	ctx := context.Background()
	if err := k.Create(ctx, volume); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, "volume vol-drain Ready (sandlot-api's sweep)", func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(volume), volume); err != nil {
			return err
		}
		if volume.Status.Phase != sandlotv1.VolumeReady {
			return errors.New("phase " + string(volume.Status.Phase))
		}
		return nil
	})
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "mounted", Namespace: "default"},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: tpl}, TimeoutSeconds: ptr.To[int32](1800),
			VolumeMounts: []sandlotv1.VolumeMount{{Name: "shared", Path: "/mnt/vol"}}}}
	if err := k.Create(ctx, sbx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbxtest.Delete(t, k, "mounted") })
	sbx = sbxtest.WaitRunning(t, k, "mounted")
	sbxtest.EnvdRun(t, k, sbx, "echo before the move > /mnt/vol/before.txt")
	return sbx
}

// volumeMoved: on its new node the sandbox reads what it wrote to the
// volume before the move and what another writer (here the node itself)
// wrote after, and its new writes land in the volume's directory.
func volumeMoved(t *testing.T, k client.Client) {
	t.Helper()
	dir := filepath.Join(volumesDir, "default", string(volume.UID))
	if err := os.WriteFile(filepath.Join(dir, "after.txt"), []byte("written after the move\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sbx := sbxtest.WaitRunning(t, k, "mounted")
	got := sbxtest.EnvdRun(t, k, sbx, "cat /mnt/vol/before.txt /mnt/vol/after.txt && echo moved > /mnt/vol/moved.txt")
	if got != "before the move\nwritten after the move\n" {
		t.Errorf("mounted reads %q from its volume on %s", got, sbx.Status.NodeName)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "moved.txt")); err != nil || strings.TrimSpace(string(b)) != "moved" {
		t.Errorf("the volume's directory has %q, %v from the moved sandbox", b, err)
	}
}

package isolation

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	miniogo "github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestTamperedBucket: a byte flipped in a snapshot's memory object in the
// bucket makes the restore on another node (which must download it) fail
// with IntegrityCheckFailed: no VM runs for it, and the snapshot's own
// sandbox is untouched. (A forged completion marker and an edited
// manifest are refused the same way: nodeagent/store's tests on MinIO.)
func TestTamperedBucket(t *testing.T) {
	k := sbxtest.Client(t, c)
	isoTemplate(t, k)
	src := sbxtest.Create(t, k, "iso", "iso-src")["iso-src"]
	snap := sbxtest.Snapshot(t, k, "iso-src-snap", src.Name)
	sbxtest.WaitData(t, k, snap, 3*time.Minute, "remote Ready", sbxtest.RemoteReady)
	flipByte(t, "snapshots/"+string(snap.UID)+"/")
	sbxtest.Cordon(t, k, src.Status.NodeName, true)
	t.Cleanup(func() { sbxtest.Cordon(t, k, src.Status.NodeName, false) })
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "iso-forged", Namespace: "default"},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Snapshot: snap.Name}, TimeoutSeconds: ptr.To[int32](600)}}
	if err := k.Create(context.Background(), sbx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbxtest.Delete(t, k, sbx.Name) })
	poll.Eventually(t, 4*time.Minute, "an IntegrityCheckFailed event on the snapshot", func() error {
		var events corev1.EventList
		if err := k.List(context.Background(), &events, client.InNamespace("default")); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.UID == snap.UID && e.Reason == "IntegrityCheckFailed" {
				t.Logf("event: %s", e.Message)
				return nil
			}
		}
		return fmt.Errorf("none yet among %d events", len(events.Items))
	})
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err != nil {
		t.Fatal(err)
	}
	if sbx.Status.Phase == sandlotv1.SandboxRunning {
		t.Fatalf("the sandbox restored from tampered data runs")
	}
	if sbx.Status.PodName != "" {
		var pod corev1.Pod
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: sbx.Status.PodName}, &pod); err == nil && noQEMU(string(pod.UID)) != nil {
			t.Fatal(noQEMU(string(pod.UID)))
		}
	}
	// Its node cordoned, the source sandbox moved to the other node (a
	// cordon starts a drain of sandboxes): read it where it runs now.
	src = sbxtest.WaitRunning(t, k, src.Name)
	if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, src, "echo untouched")); got != "untouched" {
		t.Fatalf("the snapshot's own sandbox: %q", got)
	}
}

// flipByte inverts one byte in the middle of the snapshot's memory object
// (its changed pages, or its full RAM) in the bucket.
func flipByte(t *testing.T, prefix string) {
	t.Helper()
	ctx := context.Background()
	s3 := c.MinIOServer
	mc := s3.Client()
	var name string
	for _, o := range s3.Objects(t, s3.Bucket, prefix) {
		if strings.HasSuffix(o, "/memory.layer") || (name == "" && strings.HasSuffix(o, "/memory")) {
			name = o
		}
	}
	if name == "" {
		t.Fatalf("no memory object under %s: %v", prefix, s3.Objects(t, s3.Bucket, prefix))
	}
	obj, err := mc.GetObject(ctx, s3.Bucket, name, miniogo.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || len(data) == 0 {
		t.Fatalf("read %s: %d bytes, %v", name, len(data), err)
	}
	data[len(data)/2] ^= 0xff
	if _, err := mc.PutObject(ctx, s3.Bucket, name, bytes.NewReader(data), int64(len(data)), miniogo.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("flipped byte %d of %s (%d bytes)", len(data)/2, name, len(data))
}

// noQEMU is nil when no QEMU runs for the pod.
func noQEMU(podUID string) error {
	if q, ok := findQEMU(podUID); ok {
		return fmt.Errorf("a QEMU (pid %d) runs for pod %s", q.pid, podUID)
	}
	return nil
}

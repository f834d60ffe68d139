package drain

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// TestNodeLostRestoresElsewhere: a sandbox with spec.onNodeLost Restore
// whose node loses power (its kubelet and every VM on it killed) runs
// again on the other node once an operator taints the node
// out-of-service, restored from its last snapshot in the shared store:
// same sandbox ID, the snapshot's files and not what was written after
// it. Runs last: the node stays down.
func TestNodeLostRestoresElsewhere(t *testing.T) {
	k := sbxtest.Client(t, c)
	lost, other := c.Nodes[0].Name, c.Nodes[1].Name
	sbxtest.Template(t, k, "drn") // made by the drain's test when it ran first
	cordon(t, other, true)
	sbx := sbxtest.Create(t, k, "drn", "phoenix")["phoenix"]
	cordon(t, other, false)
	sbxtest.Patch(t, k, &sandlotv1.Sandbox{}, "phoenix", `{"spec":{"onNodeLost":"Restore"}}`)
	if sbx.Status.NodeName != lost {
		t.Fatalf("phoenix runs on %s, want %s", sbx.Status.NodeName, lost)
	}
	sbxtest.EnvdRun(t, k, sbx, "echo kept > /root/state")
	snap := sbxtest.Snapshot(t, k, "phoenix-snap", "phoenix")
	sbxtest.WaitData(t, k, snap, 3*time.Minute, "in the shared store", sbxtest.RemoteReady)
	sbxtest.EnvdRun(t, k, sbx, "echo after > /root/after")

	start := time.Now()
	powerOff(t, k, lost)
	sbxtest.WaitNotReady(t, k, lost)
	t.Logf("%s powered off; NotReady after %v", lost, time.Since(start).Round(time.Second))
	if _, err := c.Kubectl(context.Background(), "taint", "node", lost, corev1.TaintNodeOutOfService+"=nodeshutdown:NoExecute"); err != nil {
		t.Fatal(err)
	}
	tainted := time.Now()
	back := sbxtest.WaitRunning(t, k, "phoenix")
	t.Logf("phoenix running on %s %v after the power-off, %v after the out-of-service taint",
		back.Status.NodeName, time.Since(start).Round(100*time.Millisecond), time.Since(tainted).Round(100*time.Millisecond))
	if back.Status.NodeName != other || back.Status.SandboxID != sbx.Status.SandboxID {
		t.Fatalf("phoenix runs as %s on %s, want %s on %s", back.Status.SandboxID, back.Status.NodeName, sbx.Status.SandboxID, other)
	}
	if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, back, "cat /root/state; ls /root/after 2>&1 || true")); !strings.HasPrefix(got, "kept") ||
		!strings.Contains(got, "No such file") {
		t.Errorf("phoenix after the restore reads %q, want the snapshot's /root/state and no /root/after", got)
	}
}

// powerOff kills a node as a power loss would: its kubelet, and the VM
// of every pod on it (the shim names QEMU after the pod's UID).
func powerOff(t *testing.T, k client.Client, node string) {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k.List(context.Background(), pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		t.Fatal(err)
	}
	if err := c.KillKubelet(node); err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, p := range pods.Items {
		if pid, _, ok := sbxtest.FindQEMU(string(p.UID)); ok {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill the VM of pod %s: %v", p.Name, err)
			}
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("no VM found on %s among its %d pods", node, len(pods.Items))
	}
}

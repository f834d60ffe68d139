// Package e2e tests sandlot end to end on a real cluster on this machine
// (test/cluster): the controller, kubelets, containerd with the sandlot
// shim, and microVMs under QEMU.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	"github.com/sandlot-dev/sandlot/test/cluster"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// kube is a controller-runtime client for the cluster.
func kube(t *testing.T) client.Client {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, sandlotv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	k, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// template makes a small template of the default image (test-owned).
func template(t *testing.T, k client.Client, name string) {
	t.Helper()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: sandlotv1.TemplateSpec{Image: defaultImage(t), Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}}}
	if err := k.Create(context.Background(), tpl); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// defaultImage is the sandbox image make vm-assets built and every node
// imported (the quickstart sample names it too).
func defaultImage(t *testing.T) string {
	t.Helper()
	env, err := vmtest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	if env.ImageRef == "" {
		t.Fatal("current.env names no default image: run `make vm-assets`")
	}
	return env.ImageRef
}

// sandboxes creates sandboxes of a template and waits until they run.
func sandboxes(t *testing.T, k client.Client, tpl string, names ...string) map[string]*sandlotv1.Sandbox {
	t.Helper()
	for _, n := range names {
		sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "default"},
			Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: tpl}, TimeoutSeconds: ptr.To[int32](1800)}}
		if err := k.Create(context.Background(), sbx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteSandbox(t, k, n) })
	}
	out := map[string]*sandlotv1.Sandbox{}
	for _, n := range names {
		out[n] = waitRunning(t, k, n)
	}
	return out
}

func waitRunning(t *testing.T, k client.Client, name string) *sandlotv1.Sandbox {
	t.Helper()
	var s sandlotv1.Sandbox
	eventually(t, 3*time.Minute, "sandbox "+name+" Running", func() error {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
			return err
		}
		if s.Status.Phase == sandlotv1.SandboxFailed {
			t.Fatalf("sandbox %s failed: %s: %s", name, s.Status.Reason, s.Status.Message)
		}
		if s.Status.Phase != sandlotv1.SandboxRunning || s.Status.PodIP == "" {
			return fmt.Errorf("phase %s (%s)", s.Status.Phase, s.Status.Message)
		}
		return nil
	})
	return &s
}

func deleteSandbox(t *testing.T, k client.Client, name string) {
	t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	if err := k.Delete(context.Background(), sbx); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete sandbox %s: %v", name, err)
	}
	eventually(t, 2*time.Minute, "sandbox "+name+" and its pod gone", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); !apierrors.IsNotFound(err) {
			return fmt.Errorf("sandbox still there (%v)", err)
		}
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod still there (%v)", err)
		}
		return nil
	})
}

func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// envdRun runs a command in a sandbox through its envd API on the pod IP.
func envdRun(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox, cmd string) string {
	t.Helper()
	var secret corev1.Secret
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: sbx.Namespace, Name: sandlotv1.TokenSecretName(sbx.Name)}, &secret); err != nil {
		t.Fatal(err)
	}
	pc := processpbconnect.NewProcessClient(http.DefaultClient, "http://"+sbx.Status.PodIP+":49983", connect.WithProtoJSON())
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}})
	req.Header().Set("X-Access-Token", string(secret.Data[sandlotv1.TokenSecretKey]))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := pc.Start(ctx, req)
	if err != nil {
		t.Fatalf("envd at %s: %v", sbx.Status.PodIP, err)
	}
	var out strings.Builder
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
	}
	if err := stream.Err(); err != nil && err != io.EOF {
		t.Fatalf("envd %q: %v", cmd, err)
	}
	return out.String()
}

func hostKernel(t *testing.T) string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestQuickstart is the README's flow: the sample applied with kubectl
// runs as a microVM that answers on its pod IP, logs, and execs; deleting
// it removes pod, VM, netns and files.
func TestQuickstart(t *testing.T) {
	k := kube(t)
	ctx := context.Background()
	if _, err := c.Kubectl(ctx, "apply", "-f", filepath.Join(cluster.RepoRoot(), "config", "samples", "quickstart.yaml")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSandbox(t, k, "hello") })
	sbx := waitRunning(t, k, "hello")
	t.Logf("sandbox hello Running on %s at %s", sbx.Status.NodeName, sbx.Status.PodIP)
	resp, err := http.Get("http://" + sbx.Status.PodIP + ":49983/health")
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("envd /health at the pod IP: %v %v", resp, err)
	}
	host := hostKernel(t)
	if got := strings.TrimSpace(envdRun(t, k, sbx, "uname -r; echo $GREETING")); !strings.Contains(got, "hello from sandlot") || strings.HasPrefix(got, host) {
		t.Fatalf("envd ran %q (host kernel %s)", got, host)
	}
	eventually(t, 30*time.Second, "kubectl logs", func() error {
		out, err := c.Kubectl(ctx, "logs", "hello")
		if err == nil && !strings.Contains(out, "ready") {
			err = fmt.Errorf("logs %q", out)
		}
		return err
	})
	out, err := c.Kubectl(ctx, "exec", "hello", "--", "uname", "-r")
	if err != nil || strings.TrimSpace(out) == host {
		t.Fatalf("kubectl exec uname -r: %q %v (host %s): not inside the VM", out, err, host)
	}
	uid := podUID(t, k, "hello")
	deleteSandbox(t, k, "hello")
	node := nodeOf(t, sbx.Status.NodeName)
	eventually(t, 30*time.Second, "VM, netns and files gone", func() error { return vmGone(node, uid) })
}

func podUID(t *testing.T, k client.Client, name string) string {
	var pod corev1.Pod
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	return string(pod.UID)
}

func nodeOf(t *testing.T, name string) *cluster.Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// vmGone checks no QEMU, pod directory, netns or guest RAM is left of a pod.
func vmGone(n *cluster.Node, podUID string) error {
	if out, _ := exec.Command("pgrep", "-f", "qemu-system.*pod-"+podUID).Output(); len(out) > 0 {
		return fmt.Errorf("QEMU still runs: %s", out)
	}
	if _, err := os.Stat(filepath.Join(n.SandlotRoot, "pods", podUID)); err == nil {
		return fmt.Errorf("pod directory still there")
	}
	if m, _ := filepath.Glob(filepath.Join(n.CRI.Dir, "state", "io.containerd.grpc.v1.cri", "netns", "*")); len(m) > 0 {
		return fmt.Errorf("netns left: %v", m)
	}
	return nil
}

// TestSpreadAndCordon: sandboxes land on both nodes; a cordoned node
// gets no new ones.
func TestSpreadAndCordon(t *testing.T) {
	k := kube(t)
	template(t, k, "small")
	placed := sandboxes(t, k, "small", "spread-a", "spread-b", "spread-c", "spread-d")
	nodes := map[string]int{}
	for _, s := range placed {
		nodes[s.Status.NodeName]++
	}
	if len(nodes) != 2 {
		t.Fatalf("4 sandboxes on nodes %v, want both nodes used", nodes)
	}
	ctx := context.Background()
	cordoned := c.Nodes[0].Name
	if _, err := c.Kubectl(ctx, "cordon", cordoned); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Kubectl(ctx, "uncordon", cordoned) })
	for _, s := range sandboxes(t, k, "small", "cordon-a", "cordon-b") {
		if s.Status.NodeName == cordoned {
			t.Fatalf("sandbox %s placed on cordoned node %s", s.Name, cordoned)
		}
	}
}

// TestKubeletDeath: a node whose kubelet dies has its sandboxes marked not
// Ready within 30 s (node-monitor-grace-period 20 s).
func TestKubeletDeath(t *testing.T) {
	k := kube(t)
	template(t, k, "small")
	sbx := sandboxes(t, k, "small", "orphan")["orphan"]
	node := sbx.Status.NodeName
	killed := time.Now()
	if err := c.KillKubelet(node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RestartKubelet(node); err != nil {
			t.Errorf("restart the kubelet of %s: %v", node, err)
		}
	})
	eventually(t, 30*time.Second, "sandbox not Ready after its kubelet died", func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &s); err != nil {
			return err
		}
		if meta.IsStatusConditionFalse(s.Status.Conditions, sandlotv1.ConditionReady) {
			return nil
		}
		return fmt.Errorf("Ready is not False")
	})
	t.Logf("sandbox on %s not Ready %v after its kubelet was killed", node, time.Since(killed).Round(time.Second))
}

// TestServiceFromPod: a pod reaches the API server through the
// `kubernetes` Service (kube-proxy's rules), TLS verified with its
// service account.
func TestServiceFromPod(t *testing.T) {
	k := kube(t)
	script := `import json, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
ctx = ssl.create_default_context(cafile=sa + "ca.crt")
req = urllib.request.Request("https://10.0.0.1:443/version", headers={"Authorization": "Bearer " + open(sa + "token").read()})
print(json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["gitVersion"])`
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "apicheck", Namespace: "default"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "check", Image: defaultImage(t), ImagePullPolicy: corev1.PullNever, Command: []string{"python3", "-c", script}}}}}
	if err := k.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), pod) })
	eventually(t, 2*time.Minute, "apicheck pod done", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if pod.Status.Phase == corev1.PodFailed {
			out, _ := c.Kubectl(context.Background(), "logs", "apicheck")
			t.Fatalf("apicheck failed: %s", out)
		}
		if pod.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s", pod.Status.Phase)
		}
		return nil
	})
	out, err := c.Kubectl(context.Background(), "logs", "apicheck")
	if err != nil || !strings.Contains(out, cluster.K8sVersion) {
		t.Fatalf("apicheck printed %q (%v), want %s", out, err, cluster.K8sVersion)
	}
}

// TestSnapshotRestore: the node agent snapshots a running sandbox into the
// local store (Ready, NotApplicable remotely); a sandbox from that
// snapshot restores it — a file and an in-memory value from before are
// there — and the agent reports VMReady on both.
func TestSnapshotRestore(t *testing.T) {
	k := kube(t)
	template(t, k, "small")
	parent := sandboxes(t, k, "small", "parent")["parent"]
	envdRun(t, k, parent, "echo on-disk > /root/file; echo in-memory > /dev/shm/value")
	ctx := context.Background()
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "parent-1", Namespace: "default"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "parent"}}}
	if err := k.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), snap) })
	eventually(t, 2*time.Minute, "snapshot Ready", func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(snap), snap); err != nil {
			return err
		}
		if snap.Status.Phase == sandlotv1.DataFailed {
			t.Fatalf("snapshot failed: %+v", snap.Status.Conditions)
		}
		if snap.Status.Phase != sandlotv1.DataReady {
			return fmt.Errorf("phase %q", snap.Status.Phase)
		}
		return nil
	})
	st := snap.Status
	if st.RemoteStatus != sandlotv1.RemoteNotApplicable || st.TotalBytes == 0 || st.Fingerprint.QEMU == "" || st.Location == "" {
		t.Fatalf("snapshot status %+v", st)
	}
	t.Logf("snapshot %s on %s: %d bytes at %s", snap.Name, st.NodeName, st.TotalBytes, st.Location)
	var node corev1.Node
	if err := k.Get(ctx, client.ObjectKey{Name: st.NodeName}, &node); err != nil {
		t.Fatal(err)
	}
	if got := node.Labels[sandlotv1.LabelFingerprint]; got == "" || got != st.Fingerprint.Key() {
		t.Fatalf("node %s fingerprint label %q, snapshot fingerprint %q", node.Name, got, st.Fingerprint.Key())
	}
	child := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: "default"},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Snapshot: snap.Name}, TimeoutSeconds: ptr.To[int32](1800)}}
	if err := k.Create(ctx, child); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSandbox(t, k, "child") })
	restored := waitRunning(t, k, "child")
	if got := envdRun(t, k, restored, "cat /root/file /dev/shm/value"); got != "on-disk\nin-memory\n" {
		t.Fatalf("restored sandbox has %q", got)
	}
	for _, name := range []string{"parent", "child"} {
		eventually(t, 30*time.Second, name+" VMReady", func() error {
			var s sandlotv1.Sandbox
			if err := k.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(s.Status.Conditions, sandlotv1.ConditionVMReady) {
				return fmt.Errorf("VMReady not True: %+v", meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionVMReady))
			}
			return nil
		})
	}
}

// TestPauseResume: pausing makes the agent write the pause package and the
// pod go (Sandbox Paused); resuming restores it on the node — same
// sandbox ID, a file and an in-memory value intact — and the package is
// released.
func TestPauseResume(t *testing.T) {
	k := kube(t)
	template(t, k, "small")
	sbx := sandboxes(t, k, "small", "napper")["napper"]
	envdRun(t, k, sbx, "echo on-disk > /root/file; echo in-memory > /dev/shm/value")
	setPaused(t, k, "napper", true)
	eventually(t, 2*time.Minute, "Paused, pod gone", func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &s); err != nil {
			return err
		}
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod still there (%v)", err)
		}
		if s.Status.Phase != sandlotv1.SandboxPaused {
			return fmt.Errorf("phase %s (%s)", s.Status.Phase, s.Status.Message)
		}
		return nil
	})
	setPaused(t, k, "napper", false)
	resumed := waitRunning(t, k, "napper")
	if resumed.Status.SandboxID != sbx.Status.SandboxID {
		t.Fatalf("sandbox ID %s after resume, %s before", resumed.Status.SandboxID, sbx.Status.SandboxID)
	}
	if got := envdRun(t, k, resumed, "cat /root/file /dev/shm/value"); got != "on-disk\nin-memory\n" {
		t.Fatalf("resumed sandbox has %q", got)
	}
	eventually(t, time.Minute, "pause package released", func() error {
		err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), &sandlotv1.PausedSandbox{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("PausedSandbox still there (%v)", err)
	})
}

func setPaused(t *testing.T, k client.Client, name string, paused bool) {
	t.Helper()
	s := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)))
	if err := k.Patch(context.Background(), s, patch); err != nil {
		t.Fatal(err)
	}
}

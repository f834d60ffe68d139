// Package sbxtest holds what tests on a real cluster (internal/cluster) do
// with sandboxes: create them from a template, wait for their phases,
// pause, run a command through envd on the pod IP, delete and wait.
package sbxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

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
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// A sandbox's state for tests that carry it through snapshots, pauses and
// moves: WriteState puts a file on its disk and a value in its memory
// (/dev/shm is a tmpfs), ReadState prints them, WantState is the output.
const (
	WriteState = "echo on-disk > /root/file; echo in-memory > /dev/shm/value"
	ReadState  = "cat /root/file /dev/shm/value"
	WantState  = "on-disk\nin-memory\n"
)

// Client is a controller-runtime client for the cluster.
func Client(t *testing.T, c *cluster.Cluster) client.Client {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, sandlotv1.AddToScheme} {
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

// Template makes a small template of the default image (test-owned) and
// waits until its base snapshot is Ready on every node.
func Template(t *testing.T, k client.Client, name string) {
	t.Helper()
	TemplateOf(t, k, "default", name, DefaultImage(t), 256)
}

// TemplateOf is Template in another namespace, of another image and size.
func TemplateOf(t *testing.T, k client.Client, ns, name, image string, memoryMiB int32) {
	t.Helper()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: sandlotv1.TemplateSpec{Image: image, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: memoryMiB}}}
	if err := k.Create(context.Background(), tpl); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Its base snapshot on every node first: sandboxes go where a base is,
	// and a test of placement wants them all.
	nodes := &corev1.NodeList{}
	if err := k.List(context.Background(), nodes, client.MatchingLabels{sandlotv1.LabelRuntime: "true"}); err != nil {
		t.Fatal(err)
	}
	if err := WaitBases(context.Background(), k, client.ObjectKeyFromObject(tpl), len(nodes.Items), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// DefaultImage is the sandbox image make vm-assets built and every node
// imported (the quickstart sample names it too).
func DefaultImage(t *testing.T) string {
	t.Helper()
	return imageRef(t, "default", func(e vmtest.Env) string { return e.ImageRef })
}

// InterpreterImage is the code-interpreter image make vm-assets built; a
// cluster imports it with Options.Interpreter.
func InterpreterImage(t *testing.T) string {
	t.Helper()
	return imageRef(t, "code-interpreter", func(e vmtest.Env) string { return e.InterpreterImageRef })
}

// imageRef is the image reference of current.env that ref picks.
func imageRef(t *testing.T, what string, ref func(vmtest.Env) string) string {
	t.Helper()
	env, err := vmtest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	if ref(env) == "" {
		t.Fatalf("current.env names no %s image: run `make vm-assets`", what)
	}
	return ref(env)
}

// Create creates sandboxes of a template and waits until they run.
func Create(t *testing.T, k client.Client, tpl string, names ...string) map[string]*sandlotv1.Sandbox {
	t.Helper()
	for _, n := range names {
		sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "default"},
			Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: tpl}, TimeoutSeconds: ptr.To[int32](1800)}}
		if err := k.Create(context.Background(), sbx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Delete(t, k, n) })
	}
	out := map[string]*sandlotv1.Sandbox{}
	for _, n := range names {
		out[n] = WaitRunning(t, k, n)
	}
	return out
}

func WaitRunning(t *testing.T, k client.Client, name string) *sandlotv1.Sandbox {
	t.Helper()
	var s sandlotv1.Sandbox
	poll.Eventually(t, 3*time.Minute, "sandbox "+name+" Running, its VM ready", func() error {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
			return err
		}
		if s.Status.Phase == sandlotv1.SandboxFailed {
			t.Fatalf("sandbox %s failed: %s: %s", name, s.Status.Reason, s.Status.Message)
		}
		// Usable, not only Running: a sandbox that claimed a pool pod or a
		// start slot runs before the node agent restored its VM there.
		if !s.Usable(s.Generation) {
			return fmt.Errorf("phase %s (%s), conditions %+v", s.Status.Phase, s.Status.Message, s.Status.Conditions)
		}
		return nil
	})
	return &s
}

// WaitVMReady waits until the node agent reports the sandbox's VM usable
// (VMReady True): for a claimed warm pool pod, Running comes with the
// claim, its identity and token only with VMReady.
func WaitVMReady(t *testing.T, k client.Client, name string) *sandlotv1.Sandbox {
	t.Helper()
	var s sandlotv1.Sandbox
	poll.Eventually(t, time.Minute, "sandbox "+name+" VMReady", func() error {
		if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(s.Status.Conditions, sandlotv1.ConditionVMReady) {
			return fmt.Errorf("conditions %+v", s.Status.Conditions)
		}
		return nil
	})
	return &s
}

func Delete(t *testing.T, k client.Client, name string) {
	t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	// Its pod: the one its status names (a pool pod or start slot it
	// claimed is named otherwise), and any pod labelled as its own (one
	// created before the status named it).
	var pod string
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); err == nil {
		pod = sbx.Status.PodName
	}
	if err := k.Delete(context.Background(), sbx); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete sandbox %s: %v", name, err)
	}
	poll.Eventually(t, 2*time.Minute, "sandbox "+name+" and its pod gone", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx); !apierrors.IsNotFound(err) {
			return fmt.Errorf("sandbox still there (%v)", err)
		}
		return PodsGone(context.Background(), k, "default", name, pod)
	})
}

// PodsGone is nil once the pod named pod (if any) and every pod labelled
// as sandbox's are gone from ns.
func PodsGone(ctx context.Context, k client.Client, ns, sandbox, pod string) error {
	if pod != "" {
		if err := k.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s still there (%v)", pod, err)
		}
	}
	pods := &corev1.PodList{}
	if err := k.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{sandlotv1.LabelSandbox: sandbox}); err != nil {
		return fmt.Errorf("pods of sandbox %s: %w", sandbox, err)
	}
	if len(pods.Items) > 0 {
		return fmt.Errorf("pod %s of sandbox %s still there", pods.Items[0].Name, sandbox)
	}
	return nil
}

// Patch merge-patches the object name in namespace default with body.
func Patch(t *testing.T, k client.Client, obj client.Object, name, body string) {
	t.Helper()
	obj.SetNamespace("default")
	obj.SetName(name)
	if err := k.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(body))); err != nil {
		t.Fatal(err)
	}
}

func SetPaused(t *testing.T, k client.Client, name string, paused bool) {
	t.Helper()
	s := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)))
	if err := k.Patch(context.Background(), s, patch); err != nil {
		t.Fatal(err)
	}
}

// DataOf is the data status of a Snapshot or a PausedSandbox.
func DataOf(o client.Object) *sandlotv1.DataStatus {
	switch o := o.(type) {
	case *sandlotv1.Snapshot:
		return &o.Status.DataStatus
	case *sandlotv1.PausedSandbox:
		return &o.Status.DataStatus
	}
	panic(fmt.Sprintf("sbxtest: %T holds no data", o))
}

// WaitData re-reads o until check accepts its data status.
func WaitData(t *testing.T, k client.Client, o client.Object, timeout time.Duration, what string, check func(*sandlotv1.DataStatus) error) {
	t.Helper()
	poll.Eventually(t, timeout, o.GetName()+" "+what, func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		return check(DataOf(o))
	})
}

// Snapshot creates a Snapshot of a sandbox (deleted when the test ends)
// and waits until its phase is Ready.
func Snapshot(t *testing.T, k client.Client, name, sandbox string) *sandlotv1.Snapshot {
	t.Helper()
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: sandbox}}}
	if err := k.Create(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), snap) })
	WaitData(t, k, snap, 2*time.Minute, "Ready", ReadyPhase(t))
	return snap
}

// ReadyPhase accepts phase Ready and fails the test on Failed.
func ReadyPhase(t *testing.T) func(*sandlotv1.DataStatus) error {
	return func(st *sandlotv1.DataStatus) error {
		if st.Phase == sandlotv1.DataFailed {
			t.Fatalf("data failed: %+v", st.Conditions)
		}
		if st.Phase != sandlotv1.DataReady {
			return fmt.Errorf("phase %q", st.Phase)
		}
		return nil
	}
}

// FromSnapshot creates a Sandbox restored from a snapshot (deleted when
// the test ends) and waits until it runs.
func FromSnapshot(t *testing.T, k client.Client, name, snapshot string) *sandlotv1.Sandbox {
	t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Snapshot: snapshot}, TimeoutSeconds: ptr.To[int32](1800)}}
	if err := k.Create(context.Background(), sbx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Delete(t, k, name) })
	return WaitRunning(t, k, name)
}

// WaitBases waits until a template's base snapshot of its current
// revision is Ready on nodes nodes (benchmarks measure restores, not
// the build).
func WaitBases(ctx context.Context, k client.Client, key client.ObjectKey, nodes int, timeout time.Duration) error {
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tpl := &sandlotv1.Template{}
	err := poll.Until(wait, fmt.Sprintf("template %s: base snapshot Ready on %d nodes", key.Name, nodes), func() error {
		if err := k.Get(ctx, key, tpl); err != nil {
			return poll.Stop(err)
		}
		ready := 0
		for _, b := range tpl.Status.BaseSnapshots {
			if b.Revision == tpl.Status.BaseRevision && b.Phase == sandlotv1.BaseReady {
				ready++
			}
		}
		if ready < nodes {
			return fmt.Errorf("Ready on %d: %+v; bases %+v", ready, tpl.Status.Conditions, tpl.Status.BaseSnapshots)
		}
		return nil
	})
	if err != nil && wait.Err() != nil {
		return fmt.Errorf("%w; nodes: %s", err, nodeSummary(ctx, k))
	}
	return err
}

// nodeSummary says, per node, what makes it (in)eligible for sandboxes:
// a test stuck on a node (DiskPressure on a full disk, NotReady) says so.
func nodeSummary(ctx context.Context, k client.Client) string {
	list := &corev1.NodeList{}
	if err := k.List(ctx, list); err != nil {
		return err.Error()
	}
	var out []string
	for _, n := range list.Items {
		var notes []string
		for _, c := range n.Status.Conditions {
			if (c.Type == corev1.NodeReady) != (c.Status == corev1.ConditionTrue) {
				notes = append(notes, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Message))
			}
		}
		for _, t := range n.Spec.Taints {
			notes = append(notes, "taint "+t.Key+":"+string(t.Effect))
		}
		if n.Spec.Unschedulable {
			notes = append(notes, "cordoned")
		}
		out = append(out, fmt.Sprintf("%s %v", n.Name, notes))
	}
	return strings.Join(out, "; ")
}

// RemoteReady is a WaitData check: the data may be restored on any node.
func RemoteReady(st *sandlotv1.DataStatus) error {
	if st.RemoteStatus != sandlotv1.RemoteReady {
		return fmt.Errorf("remote %s", st.RemoteStatus)
	}
	return nil
}

// Cordon marks a node (un)schedulable.
func Cordon(t *testing.T, k client.Client, node string, on bool) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)))
	if err := k.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, patch); err != nil {
		t.Fatal(err)
	}
}

// APIAccess is the URL of the cluster's sandlot-api and a key it issued
// for team default (the API's own issue-key, in its pod).
func APIAccess(t *testing.T, c *cluster.Cluster) (url, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, err := c.IssueAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if url, err = c.APIURL(ctx); err != nil {
		t.Fatal(err)
	}
	return url, key
}

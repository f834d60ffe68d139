package controllers_test

// The envtest suite: a real kube-apiserver and etcd, the real reconcilers.
// Nothing here runs a kubelet, so the tests play its part where needed:
// they set pod status and finish the deletion of terminating pods
// (runKubelet), and they fill in Snapshot/PausedSandbox status where the
// node agent would.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/kube"
)

var (
	envOnce sync.Once
	env     *kube.Env
	envErr  error
	// nodeKey is every test node's sealing key, as its agent publishes it.
	nodeKey = mustSealingKey()
)

func mustSealingKey() *sealed.Key {
	k, err := sealed.NewKey()
	if err != nil {
		panic(err)
	}
	return k
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// zapLevel keeps reconciler logs quiet unless SANDLOT_TEST_LOG is set.
func zapLevel() zapcore.Level {
	if os.Getenv("SANDLOT_TEST_LOG") != "" {
		return -1
	}
	return 2
}

// cluster starts the API server once for the package.
func cluster(t *testing.T) *kube.Env {
	t.Helper()
	envOnce.Do(func() { env, envErr = kube.Start() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return env
}

// startController runs the sandlot reconcilers until the test ends (or
// the returned stop is called).
func startController(t *testing.T) (stop func()) {
	t.Helper()
	return startControllerWith(t, controllers.Options{})
}

// startControllerWith is startController with the controller's options.
func startControllerWith(t *testing.T, opts controllers.Options) (stop func()) {
	t.Helper()
	e := cluster(t)
	// The controller runs as the chart's service account with the chart's
	// RBAC: admin credentials would hide a missing grant.
	cfg, err := e.ComponentConfig("sandlot-controller")
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 e.Scheme,
		Cache:                  controllers.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Each test runs its own manager in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.SetupAll(mgr, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// harness bundles a test's namespace and client.
type harness struct {
	t  *testing.T
	c  client.Client
	ns string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	e := cluster(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, c: e.Client, ns: ns.Name}
}

func (h *harness) key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: h.ns, Name: name}
}

func (h *harness) create(obj client.Object) {
	h.t.Helper()
	if obj.GetNamespace() == "" {
		obj.SetNamespace(h.ns)
	}
	if err := h.c.Create(context.Background(), obj); err != nil {
		h.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// eventually polls f until it returns nil (the repository's one poller).
func (h *harness) eventually(timeout time.Duration, what string, f func() error) {
	h.t.Helper()
	poll.Eventually(h.t, timeout, what, f)
}

// consistently checks f stays nil for d.
func (h *harness) consistently(d time.Duration, what string, f func() error) {
	h.t.Helper()
	poll.Consistently(h.t, d, what, f)
}

func (h *harness) sandbox(name string) *sandlotv1.Sandbox {
	h.t.Helper()
	s := &sandlotv1.Sandbox{}
	if err := h.c.Get(context.Background(), h.key(name), s); err != nil {
		h.t.Fatalf("get sandbox %s: %v", name, err)
	}
	return s
}

// editSpec changes a sandbox's spec with a merge patch, as kubectl would:
// the controller writes status concurrently, so an Update carrying a
// stale resourceVersion could conflict.
func (h *harness) editSpec(name string, edit func(*sandlotv1.SandboxSpec)) *sandlotv1.Sandbox {
	h.t.Helper()
	s := h.sandbox(name)
	base := s.DeepCopy()
	edit(&s.Spec)
	if err := h.c.Patch(context.Background(), s, client.MergeFrom(base)); err != nil {
		h.t.Fatalf("patch sandbox %s: %v", name, err)
	}
	return s
}

// waitPhase waits for a sandbox phase and returns the sandbox.
func (h *harness) waitPhase(name string, phase sandlotv1.SandboxPhase) *sandlotv1.Sandbox {
	h.t.Helper()
	var s *sandlotv1.Sandbox
	h.eventually(10*time.Second, "sandbox "+name+" "+string(phase), func() error {
		s = &sandlotv1.Sandbox{}
		if err := h.c.Get(context.Background(), h.key(name), s); err != nil {
			return err
		}
		if s.Status.Phase != phase {
			return fmt.Errorf("phase %q (%s: %s)", s.Status.Phase, s.Status.Reason, s.Status.Message)
		}
		return nil
	})
	return s
}

func (h *harness) pod(name string) *corev1.Pod {
	h.t.Helper()
	var pod *corev1.Pod
	h.eventually(10*time.Second, "pod "+name, func() error {
		pod = &corev1.Pod{}
		return h.c.Get(context.Background(), h.key(name), pod)
	})
	return pod
}

// gone waits until obj (of its UID, when set) is deleted from the API server.
func (h *harness) gone(obj client.Object) {
	h.t.Helper()
	uid := obj.GetUID() // set: a successor of the same name does not count
	h.eventually(10*time.Second, fmt.Sprintf("%T %s gone", obj, obj.GetName()), func() error {
		err := h.c.Get(context.Background(), h.key(obj.GetName()), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if uid != "" && obj.GetUID() != uid {
			return nil
		}
		return errors.New("still there")
	})
}

// setPod plays the kubelet: it writes a pod's status.
func (h *harness) setPod(name string, phase corev1.PodPhase, ip string, mutate ...func(*corev1.PodStatus)) {
	h.t.Helper()
	pod := h.pod(name)
	now := metav1.Now()
	pod.Status.Phase, pod.Status.PodIP, pod.Status.StartTime = phase, ip, &now
	if ip != "" {
		pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	for _, m := range mutate {
		m(&pod.Status)
	}
	if err := h.c.Status().Update(context.Background(), pod); err != nil {
		h.t.Fatalf("set pod %s %s: %v", name, phase, err)
	}
}

// addNode registers a Ready node labelled for sandlot; it is removed when
// the test ends.
func (h *harness) addNode(name, cpu, mem string, labels map[string]string) {
	h.t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{sandlotv1.LabelRuntime: "true"},
		Annotations: map[string]string{sandlotv1.AnnotationClaimKey: nodeKey.PublicBase64()}}}
	for k, v := range labels {
		n.Labels[k] = v
	}
	if err := h.c.Create(ctx, n); err != nil {
		h.t.Fatalf("create node %s: %v", name, err)
	}
	h.t.Cleanup(func() { _ = h.c.Delete(context.Background(), n) })
	n.Status = corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}},
	}
	if err := h.c.Status().Update(ctx, n); err != nil {
		h.t.Fatalf("set node %s ready: %v", name, err)
	}
	// The API server taints a new node not-ready; the node lifecycle
	// controller (not running here) lifts it once the node is Ready.
	n.Spec.Taints = nil
	if err := h.c.Update(ctx, n); err != nil {
		h.t.Fatalf("untaint node %s: %v", name, err)
	}
}

// runKubelet finishes the graceful deletion of pods, as a kubelet would
// once their containers stopped, until the test ends.
func (h *harness) runKubelet() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods := &corev1.PodList{}
			if err := h.c.List(ctx, pods, client.InNamespace(h.ns)); err == nil {
				for i := range pods.Items {
					if pods.Items[i].DeletionTimestamp != nil {
						_ = h.c.Delete(ctx, &pods.Items[i], client.GracePeriodSeconds(0))
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

// template creates a Template the controller accepts and builds its base
// snapshots (the harness plays kubelet and agent for the builders).
func (h *harness) template(name string, mem int32) *sandlotv1.Template {
	h.t.Helper()
	tpl := h.acceptedTemplate(name, mem)
	h.buildBases(name)
	return tpl
}

// acceptedTemplate creates a Template and waits until it is accepted.
// It is deleted when the test ends: the nodes are the cluster's, and a
// later test's controller would build it on that test's nodes.
func (h *harness) acceptedTemplate(name string, mem int32) *sandlotv1.Template {
	h.t.Helper()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: sandlotv1.TemplateSpec{
		Image:     "docker.io/library/python:3.12",
		Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: mem},
		Env:       []sandlotv1.EnvVar{{Name: "FROM_TEMPLATE", Value: "t"}, {Name: "SHARED", Value: "template"}},
	}}
	h.create(tpl)
	h.eventually(10*time.Second, "template accepted", func() error {
		got := &sandlotv1.Template{}
		if err := h.c.Get(context.Background(), h.key(name), got); err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == sandlotv1.ConditionAccepted && c.Status == metav1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", got.Status.Conditions)
	})
	h.t.Cleanup(func() { _ = h.c.Delete(context.Background(), tpl) })
	return tpl
}

// editTemplate changes a template's spec (a merge patch, as kubectl sends).
func (h *harness) editTemplate(name string, edit func(*sandlotv1.TemplateSpec)) {
	h.t.Helper()
	tpl := &sandlotv1.Template{}
	if err := h.c.Get(context.Background(), h.key(name), tpl); err != nil {
		h.t.Fatal(err)
	}
	orig := tpl.DeepCopy()
	edit(&tpl.Spec)
	if err := h.c.Patch(context.Background(), tpl, client.MergeFrom(orig)); err != nil {
		h.t.Fatal(err)
	}
}

// runPool plays the kubelet for a template's unclaimed pool pods until
// want of them run, and returns their names.
func (h *harness) runPool(tpl string, want int) map[string]bool {
	h.t.Helper()
	names := map[string]bool{}
	h.eventually(20*time.Second, fmt.Sprintf("%d pool pods of %s running", want, tpl), func() error {
		pods := &corev1.PodList{}
		if err := h.c.List(context.Background(), pods, client.InNamespace(h.ns),
			client.MatchingLabels{sandlotv1.LabelPool: tpl, sandlotv1.LabelSandbox: ""}); err != nil {
			return err
		}
		clear(names)
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase != corev1.PodRunning {
				h.setPod(p.Name, corev1.PodRunning, "10.98.0.1")
			}
			names[p.Name] = true
		}
		if len(names) != want {
			return fmt.Errorf("%d pool pods", len(names))
		}
		return nil
	})
	return names
}

// buildBases plays the kubelet and the node agent for a template's
// builders until its base snapshot is Ready: each builder's pod runs and
// passes its probe, and the Snapshot of it is Ready on its node.
func (h *harness) buildBases(tpl string) {
	h.t.Helper()
	h.eventually(20*time.Second, "template "+tpl+" base snapshot Ready", func() error {
		if err := h.playBuilders(tpl); err != nil {
			return err
		}
		got := &sandlotv1.Template{}
		if err := h.c.Get(context.Background(), h.key(tpl), got); err != nil {
			return err
		}
		if c := condition(got.Status.Conditions, sandlotv1.ConditionBaseSnapshotReady); c.Status != metav1.ConditionTrue {
			return fmt.Errorf("BaseSnapshotReady %s %s: %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})
}

// playBuilders plays the kubelet and the agent for tpl's builders: their
// pods turn Ready, their snapshots Ready.
func (h *harness) playBuilders(tpl string) error {
	ctx := context.Background()
	builders := &sandlotv1.SandboxList{}
	if err := h.c.List(ctx, builders, client.InNamespace(h.ns)); err != nil {
		return err
	}
	for _, b := range builders.Items {
		if b.Annotations[sandlotv1.AnnotationBaseOf] != tpl || b.Status.Phase != sandlotv1.SandboxStarting {
			continue
		}
		h.setPod(b.Name, corev1.PodRunning, "10.99.0.1", func(st *corev1.PodStatus) {
			st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		})
	}
	snaps := &sandlotv1.SnapshotList{}
	if err := h.c.List(ctx, snaps, client.InNamespace(h.ns)); err != nil {
		return err
	}
	for _, sn := range snaps.Items {
		if sn.Status.NodeName != "" && sn.Status.Phase == sandlotv1.DataPending && strings.HasPrefix(sn.Name, tpl+"-base-") {
			h.setSnapshot(sn.Name, func(st *sandlotv1.SnapshotStatus) {
				st.Phase, st.Location, st.RemoteStatus = sandlotv1.DataReady, "store://"+sn.Name, sandlotv1.RemoteNotApplicable
			})
		}
	}
	return nil
}

func newSandbox(name string, src sandlotv1.SandboxSource) *sandlotv1.Sandbox {
	return &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: sandlotv1.SandboxSpec{Source: src}}
}

func condition(conds []metav1.Condition, typ string) metav1.Condition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func mustContain(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Fatalf("%s = %q, want it to contain %q", what, got, want)
	}
}

// withController is the usual start of a test: a namespace, the kubelet
// stand-in, the controller, one roomy node and an accepted "python" template.
func withController(t *testing.T, node string, memMiB int32) *harness {
	t.Helper()
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode(node, "8", "16Gi", nil)
	h.template("python", memMiB)
	return h
}

// running creates a sandbox, plays the kubelet starting its pod with ip,
// and returns it once Running.
func (h *harness) running(sbx *sandlotv1.Sandbox, ip string) *sandlotv1.Sandbox {
	h.t.Helper()
	h.create(sbx)
	h.waitPhase(sbx.Name, sandlotv1.SandboxStarting)
	h.setPod(sbx.Name, corev1.PodRunning, ip)
	return h.waitPhase(sbx.Name, sandlotv1.SandboxRunning)
}

package nodeagent_test

// The envtest suite of the node agent: a real kube-apiserver and etcd, the
// agent's real reconcilers in a manager that authenticates as the chart's
// sandlot-agent service account (never admin: a missing grant must show),
// the real local store in a temporary directory, and fake shims behind
// the agent's dialer seam. The tests play the controller and the kubelet
// with an admin client: they create Sandboxes, pods and Snapshots and
// write the status those would.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
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
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/test/kube"
)

var (
	envOnce sync.Once
	env     *kube.Env
	envErr  error
)

func TestMain(m *testing.M) {
	level := zapcore.Level(2) // quiet unless SANDLOT_TEST_LOG is set
	if os.Getenv("SANDLOT_TEST_LOG") != "" {
		level = -1
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(level)))
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// cluster starts the API server once for the package.
func cluster(t *testing.T) *kube.Env {
	t.Helper()
	envOnce.Do(func() { env, envErr = kube.Start() })
	if envErr != nil {
		t.Fatalf("%v (the assets come from `make envtest-assets`)", envErr)
	}
	return env
}

// wait is how long the agent gets for anything here: a VM that does not
// answer is probed again every 2s.
const wait = 30 * time.Second

// agent is one node's agent under test and the admin client that plays
// the controller and the kubelet around it, in a namespace of its own.
type agent struct {
	t     *testing.T
	c     client.Client
	ns    string
	node  string
	store store.Store
	shims *fakeShims
	// stageSocket is where the agent answers shims' stage requests.
	stageSocket string
	// claimKey is the node's sealing key, as the agent loads it.
	claimKey *sealed.Key
}

// seal seals id to the agent's node for pod and sandbox, as the
// controller does in a claim.
func (a *agent) seal(pod, sandbox string, id sealed.Identity) []byte {
	a.t.Helper()
	box, err := sealed.SealIdentity(a.claimKey.PublicBase64(), sealed.Context(a.ns, pod, sandbox), id)
	if err != nil {
		a.t.Fatalf("seal: %v", err)
	}
	return box
}

// startAgent runs the agent for a node of its own until the test ends,
// on st (nil: a local store in a temporary directory).
func startAgent(t *testing.T, st store.Store) *agent {
	t.Helper()
	e := cluster(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if st == nil {
		local, err := store.NewLocal(t.TempDir())
		if err != nil {
			t.Fatalf("local store: %v", err)
		}
		st = local
	}
	a := &agent{t: t, c: e.Client, ns: ns.Name, node: "node-" + ns.Name, store: st, shims: &fakeShims{}}
	cfg, err := e.ComponentConfig("sandlot-agent")
	if err != nil {
		t.Fatalf("the agent's service account: %v", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: e.Scheme, Cache: nodeagent.CacheOptions(a.node, a.api()),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// Each test runs its own manager in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatalf("agent manager: %v", err)
	}
	a.stageSocket = stageSocket(t)
	root := t.TempDir()
	if a.claimKey, err = nodeagent.LoadClaimKey(nodeagent.ClaimKeyPath(root)); err != nil {
		t.Fatal(err)
	}
	n := nodeagent.Node{Name: a.node, SandlotRoot: root, ClaimKey: a.claimKey, Store: st, Dialer: a.shims, StageSocket: a.stageSocket, APIService: a.api(),
		PodIP: agentPodIP}
	if err := nodeagent.Setup(mgr, n); err != nil {
		t.Fatalf("set up the agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent manager: %v", err)
		}
	})
	return a
}

// agentPodIP is the test agent's own pod address (the chart's $(POD_IP)).
const agentPodIP = "10.99.0.5"

// stageSocket is a socket path in a directory of its own, short enough
// for a unix socket (a test's TempDir, named after it, may not be).
func stageSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "stage")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "agent.sock")
}

func (a *agent) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: a.ns, Name: name}
}

func (a *agent) create(obj client.Object) {
	a.t.Helper()
	obj.SetNamespace(a.ns)
	if err := a.c.Create(context.Background(), obj); err != nil {
		a.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// get reads obj (by its name) afresh.
func (a *agent) get(obj client.Object) error {
	return a.c.Get(context.Background(), a.key(obj.GetName()), obj)
}

// eventually waits for f with the suite's deadline.
func (a *agent) eventually(what string, f func() error) {
	a.t.Helper()
	poll.Eventually(a.t, wait, what, f)
}

// setStatus plays the controller (or kubelet) writing obj's status: read,
// change, update, again on a conflict with the agent's writes.
func (a *agent) setStatus(obj client.Object, mutate func()) {
	a.t.Helper()
	a.eventually(fmt.Sprintf("status of %T %s", obj, obj.GetName()), func() error {
		if err := a.get(obj); err != nil {
			return err
		}
		mutate()
		return a.c.Status().Update(context.Background(), obj)
	})
}

// sandbox creates a Sandbox the controller placed on the agent's node
// (status Running, its pod named after it) and returns it. Its status
// places it on the node: the agent's cache holds it from then on.
func (a *agent) sandbox(name, id string) *sandlotv1.Sandbox {
	a.t.Helper()
	return a.sandboxOn(name, id, a.node)
}

// sandboxOn is sandbox placed on node.
func (a *agent) sandboxOn(name, id, node string) *sandlotv1.Sandbox {
	a.t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "python"}}}
	a.create(sbx)
	a.setStatus(sbx, func() {
		sbx.Status.Phase, sbx.Status.SandboxID = sandlotv1.SandboxRunning, id
		sbx.Status.NodeName, sbx.Status.PodName = node, name
	})
	return sbx
}

// pod creates a pod bound to the agent's node with a fake VM in vmState
// and, unless phase is empty, plays the kubelet setting its phase.
func (a *agent) pod(name string, labels, annotations map[string]string, phase corev1.PodPhase, vmState string) (*corev1.Pod, *fakeVM) {
	a.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: a.node, Containers: []corev1.Container{{Name: sandlotv1.ContainerName, Image: "sandbox"}}}}
	a.create(pod)
	v := a.shims.vm(pod.UID, vmState)
	if phase != "" {
		a.setStatus(pod, func() { pod.Status.Phase = phase })
	}
	return pod, v
}

// api is the sandlot-api Service the test's agent follows: its
// EndpointSlices in the test's namespace.
func (a *agent) api() types.NamespacedName {
	return types.NamespacedName{Namespace: a.ns, Name: "sandlot-api"}
}

// condition is typ of conds (empty when absent).
func condition(conds []metav1.Condition, typ string) metav1.Condition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// hasCondition says why obj's condition typ is not status with reason.
func hasCondition(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) error {
	if c := condition(conds, typ); c.Status != status || c.Reason != reason {
		return fmt.Errorf("%s is %q %q (%s), want %s %s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
	return nil
}

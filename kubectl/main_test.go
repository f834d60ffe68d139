package kubectl

// The envtest fixture: a real kube-apiserver and etcd with sandlot's CRDs
// and an admin kubeconfig the commands use. No controller or node agent
// runs: the tests play them, writing status through the status
// subresource while a command waits. Each test works in its own
// namespace.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/kube"
)

type fixture struct {
	env        *kube.Env
	c          client.Client // the test's own view, straight to the API server
	kubeconfig string
	dir        string
}

var (
	fxOnce sync.Once
	fx     *fixture
	fxErr  error
	nsSeq  atomic.Int32
	notDNS = regexp.MustCompile(`[^a-z0-9-]+`)
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if fx != nil {
		_ = fx.env.Stop()
		_ = os.RemoveAll(fx.dir)
	}
	os.Exit(code)
}

// setup starts the API server once for the package (unit tests never
// call it) and returns a fresh namespace for the test.
func setup(t *testing.T) (*fixture, string) {
	t.Helper()
	fxOnce.Do(func() { fx, fxErr = startFixture() })
	if fxErr != nil {
		t.Fatal(fxErr)
	}
	ns := fmt.Sprintf("t%d-%s", nsSeq.Add(1), notDNS.ReplaceAllString(strings.ToLower(t.Name()), "-"))
	ns = strings.TrimRight(ns[:min(len(ns), 50)], "-")
	if err := fx.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return fx, ns
}

func startFixture() (*fixture, error) {
	env, err := kube.Start()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kubectl-sandlot-test-")
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	kc, err := env.Kubeconfig(dir)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &fixture{env: env, c: env.Client, kubeconfig: kc, dir: dir}, nil
}

// syncBuffer is a bytes.Buffer a test may read while a command writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// result is one finished command.
type result struct {
	out, errOut string
	err         error
}

// running is a command under way.
type running struct {
	out, errOut *syncBuffer
	done        chan result
	stop        context.CancelFunc // Ctrl-C
}

// start runs `kubectl sandlot args...` (against the fixture, in ns when
// ns is not "") through the root command, in the background.
func (f *fixture) start(ns string, args ...string) *running {
	global := []string{"--kubeconfig", f.kubeconfig}
	if ns != "" {
		global = append(global, "-n", ns)
	}
	if len(args) > 0 && args[0] == "__complete" {
		args = append(append([]string{"__complete"}, global...), args[1:]...)
	} else {
		args = append(global, args...)
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &running{out: &syncBuffer{}, errOut: &syncBuffer{}, done: make(chan result, 1), stop: stop}
	cmd := NewRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: r.out, ErrOut: r.errOut})
	cmd.SetArgs(args)
	go func() {
		defer stop()
		err := cmd.ExecuteContext(ctx)
		r.done <- result{r.out.String(), r.errOut.String(), err}
	}()
	return r
}

// wait is the command's result; it fails the test after within.
func (r *running) wait(t *testing.T, within time.Duration) result {
	t.Helper()
	select {
	case res := <-r.done:
		return res
	case <-time.After(within):
		t.Fatalf("the command did not finish within %v; stdout:\n%s\nstderr:\n%s", within, r.out, r.errOut)
		return result{}
	}
}

// pending fails the test if the command finishes within d.
func (r *running) pending(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case res := <-r.done:
		t.Fatalf("the command finished before %s: err %v\nstdout:\n%s\nstderr:\n%s", why, res.err, res.out, res.errOut)
	case <-time.After(d):
	}
}

// via is the fixture with its commands reaching the API server through
// kubeconfig (a fakePod's).
func (f *fixture) via(kubeconfig string) *fixture {
	g := *f
	g.kubeconfig = kubeconfig
	return &g
}

// run runs a command to its end.
func (f *fixture) run(t *testing.T, ns string, args ...string) result {
	t.Helper()
	return f.start(ns, args...).wait(t, 30*time.Second)
}

// ok runs a command that must succeed.
func (f *fixture) ok(t *testing.T, ns string, args ...string) result {
	t.Helper()
	res := f.run(t, ns, args...)
	if res.err != nil {
		t.Fatalf("kubectl sandlot %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), res.err, res.out, res.errOut)
	}
	return res
}

// fails runs a command that must fail with an error containing each of want.
func (f *fixture) fails(t *testing.T, ns string, args []string, want ...string) result {
	t.Helper()
	res := f.run(t, ns, args...)
	wantError(t, res.err, want...)
	return res
}

func wantError(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func contains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

// waitTimeout is how long the test's side waits for what a command under way
// does (the commands themselves watch).
const waitTimeout = 10 * time.Second

// shows waits until the command's stderr shows s.
func (r *running) shows(t *testing.T, s string) {
	t.Helper()
	poll.Eventually(t, waitTimeout, fmt.Sprintf("stderr shows %q", s), func() error {
		if out := r.errOut.String(); !strings.Contains(out, s) {
			return fmt.Errorf("stderr so far:\n%s", out)
		}
		return nil
	})
}

func (f *fixture) template(t *testing.T, ns, name string) {
	t.Helper()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: sandlotv1.TemplateSpec{Image: "registry.example/python:3.12"}}
	if err := f.c.Create(context.Background(), tpl); err != nil {
		t.Fatal(err)
	}
}

// sandbox creates a Sandbox of template "python" (as a user would).
func (f *fixture) sandbox(t *testing.T, ns, name string, mutate func(*sandlotv1.Sandbox)) *sandlotv1.Sandbox {
	t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "python"}}}
	if mutate != nil {
		mutate(sbx)
	}
	if err := f.c.Create(context.Background(), sbx); err != nil {
		t.Fatal(err)
	}
	return sbx
}

// get reads an object of the test's namespace.
func (f *fixture) get(t *testing.T, ns, name string, obj client.Object) {
	t.Helper()
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatal(err)
	}
}

// setStatus plays the controller or node agent: it changes obj's status
// (read fresh, retried on conflicts) through the status subresource.
func setStatus[T client.Object](t *testing.T, f *fixture, obj T, change func(T)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return f.c.Status().Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("set the status of %s: %v", obj.GetName(), err)
	}
}

// running makes the sandbox usable at its current generation.
func (f *fixture) running(t *testing.T, sbx *sandlotv1.Sandbox, node, ip string) {
	t.Helper()
	setStatus(t, f, sbx, func(s *sandlotv1.Sandbox) {
		s.Status.Phase, s.Status.NodeName, s.Status.PodIP = sandlotv1.SandboxRunning, node, ip
		s.Status.PodName = s.Name + "-pod"
		setVMReady(s, metav1.ConditionTrue, s.Generation)
	})
}

// pausedSandbox plays the node agent having paused sbx on node: its
// PausedSandbox, data Ready with remoteStatus remote and size bytes.
func (f *fixture) pausedSandbox(t *testing.T, sbx *sandlotv1.Sandbox, node string, remote sandlotv1.RemoteStatus, bytes int64) {
	t.Helper()
	ps := &sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: sbx.Name, Namespace: sbx.Namespace},
		Spec: sandlotv1.PausedSandboxSpec{SandboxID: sandboxID(sbx), NodeName: node, PodName: sbx.Name + "-pod"}}
	if err := f.c.Create(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	setStatus(t, f, ps, func(p *sandlotv1.PausedSandbox) {
		p.Status.Phase, p.Status.NodeName, p.Status.RemoteStatus = sandlotv1.DataReady, node, remote
		p.Status.TotalBytes = bytes
	})
}

func setVMReady(s *sandlotv1.Sandbox, status metav1.ConditionStatus, gen int64) {
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionVMReady,
		Status: status, ObservedGeneration: gen, Reason: "Restored", Message: "envd answers"})
}

// list lists the namespace's objects of list's kind.
func (f *fixture) list(t *testing.T, ns string, list client.ObjectList) {
	t.Helper()
	if err := f.c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
}

// onlySnapshot waits until the namespace holds one snapshot (the one a
// command under way made) and returns it.
func (f *fixture) onlySnapshot(t *testing.T, ns, what string) *sandlotv1.Snapshot {
	t.Helper()
	var snap *sandlotv1.Snapshot
	poll.Eventually(t, waitTimeout, what, func() error {
		list := &sandlotv1.SnapshotList{}
		f.list(t, ns, list)
		if len(list.Items) != 1 {
			return fmt.Errorf("%d snapshots", len(list.Items))
		}
		snap = &list.Items[0]
		return nil
	})
	return snap
}

// exists reports whether the named object is there.
func (f *fixture) exists(t *testing.T, ns, name string, obj client.Object) bool {
	t.Helper()
	err := f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// waitExists waits until a command under way made the named object and
// reads it into obj.
func (f *fixture) waitExists(t *testing.T, ns, name string, obj client.Object) {
	t.Helper()
	poll.Eventually(t, waitTimeout, fmt.Sprintf("%T %s exists", obj, name), func() error {
		if !f.exists(t, ns, name, obj) {
			return fmt.Errorf("not found")
		}
		return nil
	})
}

// waitSpec waits until a command under way wrote the named sandbox's spec
// as ok wants and reads it into sbx.
func (f *fixture) waitSpec(t *testing.T, ns, name string, sbx *sandlotv1.Sandbox, what string, ok func(sandlotv1.SandboxSpec) bool) {
	t.Helper()
	poll.Eventually(t, waitTimeout, what, func() error {
		if f.get(t, ns, name, sbx); !ok(sbx.Spec) {
			return fmt.Errorf("spec %+v", sbx.Spec)
		}
		return nil
	})
}

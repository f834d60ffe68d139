package shim

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sandlot-dev/sandlot/api/node"
)

const (
	testPod    = "pod1"
	testApp    = "app1"
	testUID    = "uid1"
	testImage  = "docker.io/library/python:3.12"
	testDigest = "sha256:0123456789abcdef"
)

// harness is a task service on fakes: a node config and an image cache
// in a temporary root, fake QEMU, netns and image store.
type harness struct {
	t      *testing.T
	ctx    context.Context
	s      *service
	vms    *fakeHypervisor
	net    *fakeNetwork
	cfg    node.Config
	opts   *anypb.Any
	digest string // the image store's answer ("" fails the lookup)
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	_ = log.SetLevel("warn") // not a line per VM booted
	// Short: the control socket's path must fit a sockaddr_un.
	root, err := os.MkdirTemp("", "shim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	cfg := node.Config{Root: filepath.Join(root, "r"), ImageDir: filepath.Join(root, "img"),
		MemoryDir: filepath.Join(root, "mem"), Kernel: filepath.Join(root, "vmlinux"), Initrd: filepath.Join(root, "initrd")}
	h := &harness{t: t, vms: &fakeHypervisor{}, net: &fakeNetwork{}, cfg: cfg, digest: testDigest}
	h.writeFile(cfg.Kernel, "kernel")
	h.writeFile(cfg.Initrd, "initrd")
	// The image's base disk is cached: Create builds none.
	h.writeFile(filepath.Join(cfg.ImageDir, "sha256-0123456789abcdef.ext4"), "ext4")
	h.writeFile(filepath.Join(root, "config.json"), mustJSON(t, cfg))
	if h.opts, err = typeurl.MarshalAnyToProto(&runtimeoptions.Options{ConfigPath: filepath.Join(root, "config.json")}); err != nil {
		t.Fatal(err)
	}
	_, sd := shutdown.WithShutdown(context.Background())
	t.Cleanup(func() { sd.Shutdown(); <-sd.Done() }) // stops every VM left
	h.ctx = namespaces.WithNamespace(context.Background(), "k8s.io")
	h.s = newService(sd, host{vms: h.vms, network: h.net, digest: func(context.Context, string) (string, error) {
		if h.digest == "" {
			return "", os.ErrNotExist
		}
		return h.digest, nil
	}})
	return h
}

func (h *harness) writeFile(path, data string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// bundle writes an OCI bundle of spec and returns its directory.
func (h *harness) bundle(spec *specs.Spec) string {
	h.t.Helper()
	dir := h.t.TempDir()
	h.writeFile(filepath.Join(dir, "config.json"), mustJSON(h.t, spec))
	return dir
}

func pauseSpec() *specs.Spec {
	return &specs.Spec{Hostname: "sbx", Annotations: map[string]string{annContainerType: "sandbox", annSandboxUID: testUID},
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "/var/run/netns/cni-1"}}}}
}

func appSpec() *specs.Spec {
	return &specs.Spec{
		Annotations: map[string]string{annContainerType: "container", annSandboxID: testPod, annImageName: testImage},
		Process:     &specs.Process{Args: []string{"python", "app.py"}, Env: []string{"A=1"}, Cwd: "/app"},
	}
}

// create is a Create of spec as container id.
func (h *harness) create(id string, spec *specs.Spec) (*taskAPI.CreateTaskResponse, error) {
	return h.s.Create(h.ctx, &taskAPI.CreateTaskRequest{ID: id, Bundle: h.bundle(spec), Options: h.opts})
}

func (h *harness) mustCreate(id string, spec *specs.Spec) uint32 {
	h.t.Helper()
	resp, err := h.create(id, spec)
	if err != nil {
		h.t.Fatalf("create %s: %v", id, err)
	}
	return resp.Pid
}

// pod creates the pod's pause and app containers; it returns the VM.
func (h *harness) pod() *fakeMachine {
	h.t.Helper()
	h.mustCreate(testPod, pauseSpec())
	h.mustCreate(testApp, appSpec())
	return h.vms.last()
}

// startedPod is pod with both containers started: it returns the VM and
// the app process's guest PID.
func (h *harness) startedPod() (*fakeMachine, int) {
	h.t.Helper()
	m := h.pod()
	h.start(testPod, "")
	h.start(testApp, "")
	return m, h.guestPID(testApp, "")
}

func (h *harness) start(id, execID string) {
	h.t.Helper()
	if _, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: id, ExecID: execID}); err != nil {
		h.t.Fatalf("start %s/%s: %v", id, execID, err)
	}
}

func (h *harness) guestPID(id, execID string) int {
	h.t.Helper()
	_, p, err := h.s.process(id, execID)
	if err != nil {
		h.t.Fatal(err)
	}
	pid, _, _, _ := p.snapshot()
	return pid
}

func (h *harness) state(id, execID string) *taskAPI.StateResponse {
	h.t.Helper()
	st, err := h.s.State(h.ctx, &taskAPI.StateRequest{ID: id, ExecID: execID})
	if err != nil {
		h.t.Fatalf("state %s/%s: %v", id, execID, err)
	}
	return st
}

// wait is a Wait bounded by a few seconds.
func (h *harness) wait(id, execID string) *taskAPI.WaitResponse {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
	defer cancel()
	resp, err := h.s.Wait(ctx, &taskAPI.WaitRequest{ID: id, ExecID: execID})
	if err != nil {
		h.t.Fatalf("wait %s/%s: %v", id, execID, err)
	}
	return resp
}

// event waits for the next event of type T, skipping others.
func event[T any](h *harness) T {
	h.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e := <-h.s.events:
			if v, ok := e.(T); ok {
				return v
			}
		case <-timeout:
			var zero T
			h.t.Fatalf("no %T event", zero)
			return zero
		}
	}
}

// drain empties the event queue and returns what was in it.
func (h *harness) drain() []any {
	var out []any
	for {
		select {
		case e := <-h.s.events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// wantCode fails unless err is the gRPC error code containerd gets.
func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

// eventually polls cond for a few seconds (exits land asynchronously).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

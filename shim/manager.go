package shim

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"syscall"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
)

// RuntimeName is the runtime_type containerd knows the shim by.
const RuntimeName = "io.containerd.sandlot.v2"

// Manager starts and cleans up shim processes (containerd runs the shim
// binary for that; the long-running shim serves the task API).
type Manager struct{}

func (Manager) Name() string { return RuntimeName }

// Start launches the shim process serving the pod of the container in
// the working directory (its bundle), or returns the address of the one
// already serving that pod: one shim and one VM per pod.
func (Manager) Start(ctx context.Context, params *bootapi.BootstrapParams) (_ *bootapi.BootstrapResult, retErr error) {
	id := params.GetInstanceID()
	spec, err := readSpec(".")
	if err != nil {
		return nil, err
	}
	group := spec.Annotations[annSandboxID]
	if group == "" {
		group = id
	}
	socketDir := params.GetSocketDir()
	if socketDir == "" {
		socketDir = "/run/containerd/s"
	}
	address, err := shim.CreateSocketAddress(ctx, socketDir, params.GetContainerdGrpcAddress(), group, false)
	if err != nil {
		return nil, err
	}
	result := &bootapi.BootstrapResult{Version: 3, Protocol: "ttrpc", Address: address}
	ln, running, err := listenShim(address)
	if err != nil || running {
		return result, err
	}
	defer func() {
		if retErr != nil {
			ln.Close()
			_ = shim.RemoveSocket(address)
		}
	}()
	f, err := ln.File()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd, err := shimCommand(ctx, id, params)
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{f}
	goruntime.LockOSThread() // Pdeathsig-free, but keep the fork on one thread as runc's shim does
	err = cmd.Start()
	goruntime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("start shim: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	if err := shim.AdjustOOMScore(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("adjust the shim's OOM score: %w", err)
	}
	return result, nil
}

// listenShim binds the pod's shim socket; running reports that the pod's
// shim answers on it already (nothing to start). A stale socket is
// replaced.
func listenShim(address string) (ln *net.UnixListener, running bool, err error) {
	ln, err = shim.NewSocket(address)
	if err == nil {
		return ln, false, nil
	}
	if !shim.SocketEaddrinuse(err) {
		return nil, false, fmt.Errorf("shim socket: %w", err)
	}
	if shim.CanConnect(address) {
		return nil, true, nil
	}
	if err := shim.RemoveSocket(address); err != nil {
		return nil, false, fmt.Errorf("remove stale shim socket: %w", err)
	}
	if ln, err = shim.NewSocket(address); err != nil {
		return nil, false, fmt.Errorf("shim socket: %w", err)
	}
	return ln, false, nil
}

func shimCommand(ctx context.Context, id string, params *bootapi.BootstrapParams) (*exec.Cmd, error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	args := []string{"-namespace", ns, "-id", id, "-address", params.GetContainerdGrpcAddress()}
	if params.GetLogLevel() <= bootapi.LogLevel_LOG_LEVEL_DEBUG {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	// Its own process group: containerd's restart does not touch it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// Stop is containerd's cleanup of a container whose shim is gone: the VM
// it left is killed and its host files, tap and filters removed. The
// exit status reports the container killed.
func (Manager) Stop(ctx context.Context, id string) (shim.StopStatus, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return shim.StopStatus{}, err
	}
	bundle := filepath.Join(filepath.Dir(cwd), id)
	if err := cleanupBundle(bundle); err != nil {
		return shim.StopStatus{}, fmt.Errorf("clean up after the shim of %s: %w", id, err)
	}
	// The pod's sandbox: its shim's own cgroup (shimcgroup.go) too. Not
	// an error to containerd: an empty cgroup left is swept by a later shim.
	_ = removeShimCgroup(id)
	return shim.StopStatus{ExitStatus: int(exitVMGone)}, nil
}

// Info describes the runtime (`containerd-shim-sandlot-v2 -info`).
func (Manager) Info(ctx context.Context, _ io.Reader) (*types.RuntimeInfo, error) {
	return &types.RuntimeInfo{Name: RuntimeName}, nil
}

var _ shim.Shim = Manager{}

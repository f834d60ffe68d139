package crienv

// The containerd process: its PATH and environment, the CRI client,
// starting, waiting for readiness, Restart, and its log.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// pathDirs is containerd's PATH: it resolves runtime_type
// io.containerd.X.v2 to containerd-shim-X-v2 there.
func (e *Env) pathDirs() []string {
	dirs := []string{e.bins.shimDir, "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
	if e.opts.ShimDir != "" {
		dirs = append([]string{e.opts.ShimDir}, dirs...)
	}
	return dirs
}

// dial makes the CRI client once; it outlives Restart. The short backoff
// matters there: with gRPC's default (1 s, growing) a restarted containerd
// would be seen seconds late.
func (e *Env) dial() error {
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = pollInterval, 200*time.Millisecond
	conn, err := grpc.NewClient("unix://"+e.Address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return fmt.Errorf("CRI client for %s: %w", e.Address, err)
	}
	e.conn = conn
	e.Runtime = runtimeapi.NewRuntimeServiceClient(conn)
	e.Images = runtimeapi.NewImageServiceClient(conn)
	return nil
}

// containerdEnv is containerd's (and so its shims') environment: our shim
// first, then the v2.4.2 runc shim (Debian's older one would be found in
// /usr/bin otherwise, and fails with 2.4), TMPDIR under Dir for its temp
// mounts, and SANDLOT_* so the sandlot shim sees the test's settings.
func (e *Env) containerdEnv() []string {
	env := []string{"PATH=" + strings.Join(e.pathDirs(), ":"), "TMPDIR=" + filepath.Join(e.Dir, "tmp"), "HOME=" + os.Getenv("HOME")}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SANDLOT_") {
			env = append(env, kv)
		}
	}
	return env
}

// startContainerd runs containerd in its own process group, so a ^C aimed
// at `go test` does not kill it before the cleanup runs, with a parent-death
// signal so a crashed test does not leave it behind. Shims get their own
// process groups from containerd and survive Restart.
func (e *Env) startContainerd(t T) {
	t.Helper()
	logf, err := os.OpenFile(e.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("crienv: %v", err)
	}
	cmd := exec.Command(e.bins.containerd, "--config", e.ConfigPath)
	cmd.Env = e.containerdEnv()
	cmd.Dir = e.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	if err := StartHeld(cmd, func(error) { logf.Close(); close(exited) }); err != nil {
		logf.Close()
		t.Fatalf("crienv: start containerd: %v", err)
	}
	e.mu.Lock()
	e.cmd, e.exited = cmd, exited
	e.mu.Unlock()
}

// waitReady polls Version and Status until the runtime and the network
// (the CNI config loaded) are ready.
func (e *Env) waitReady(t T) {
	t.Helper()
	err := poll.Within(readyTimeout, "crienv: CRI ready", func() error {
		err := e.ready()
		select {
		case <-e.exited:
			return poll.Stop(fmt.Errorf("crienv: containerd exited during start: %v", e.cmd.ProcessState))
		default:
			return err
		}
	})
	if err != nil {
		t.Fatalf("%v (containerd's log follows)", err)
	}
}

func (e *Env) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := e.Runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		return fmt.Errorf("version: %w", err)
	}
	st, err := e.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	// Other conditions (ContainerdHasNoDeprecationWarnings: cgroup v1) are
	// not about readiness.
	seen := 0
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type != runtimeapi.RuntimeReady && c.Type != runtimeapi.NetworkReady {
			continue
		}
		if !c.Status {
			return fmt.Errorf("%s false: %s %s", c.Type, c.Reason, c.Message)
		}
		seen++
	}
	if seen != 2 {
		return fmt.Errorf("status lacks RuntimeReady or NetworkReady: %v", st.GetStatus().GetConditions())
	}
	return nil
}

// logTail is the end of containerd's log, for failure messages.
func (e *Env) logTail(lines int) string {
	b, err := os.ReadFile(e.LogPath)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "containerd log (" + e.LogPath + "):\n" + strings.Join(all, "\n")
}

// Restart SIGKILLs containerd and starts it again with the same config;
// shims and containers keep running.
func (e *Env) Restart(t T) {
	t.Helper()
	e.killContainerd()
	begin := time.Now()
	e.startContainerd(t)
	e.waitReady(t)
	t.Logf("crienv: containerd restarted, ready in %v", time.Since(begin).Round(time.Millisecond))
}

func (e *Env) killContainerd() {
	e.mu.Lock()
	cmd, exited := e.cmd, e.exited
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

func (e *Env) running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.exited == nil {
		return false
	}
	select {
	case <-e.exited:
		return false
	default:
		return true
	}
}

// StartHeld starts cmd from a goroutine that keeps its OS thread until cmd
// exits, then calls exited with Wait's error. Pdeathsig fires when the
// forking *thread* exits: holding it keeps another goroutine from locking
// it and ending it (as netns code does) under the process.
func StartHeld(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}

// SignalContainerd sends sig to containerd (SIGSTOP stalls it: every
// reader of a shim's output and events stops; SIGCONT resumes it).
func (e *Env) SignalContainerd(sig syscall.Signal) error {
	e.mu.Lock()
	cmd := e.cmd
	e.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("crienv: containerd does not run")
	}
	return cmd.Process.Signal(sig)
}

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/control"
)

// DefaultPath is the PATH of processes whose env sets none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// outputIdle is how long the exit event waits for more output after the
// process has exited, when a descendant still holds its stdout/stderr.
const outputIdle = 200 * time.Millisecond

// process is one child started by start.
type process struct {
	pid      int
	proc     *os.Process
	terminal bool
	pty      *os.File // master, terminal only
	stdin    *os.File // pipe write end, or the pty master

	stdinMu      sync.Mutex
	stdinQ       []stdinOp
	stdinRunning bool
	stdinBytes   int
	stdinClosed  bool

	outputs  sync.WaitGroup
	progress atomic.Int64 // bumped around every output chunk
	emitting atomic.Int32

	done   chan struct{} // closed once the exit event is emitted
	status control.ExitStatus
}

type stdinOp struct {
	data  []byte
	close bool
	reply func(error)
}

const maxStdinQueued = 8 << 20

func (h *Handler) startMethod(_ context.Context, raw json.RawMessage) (any, error) {
	var p control.StartParams
	if e := control.DecodeParams(raw, &p); e != nil {
		return nil, e
	}
	pid, err := h.Start(p)
	if err != nil {
		return nil, err
	}
	return control.StartResult{PID: pid}, nil
}

// Start starts a process as the start method does and returns its pid.
func (h *Handler) Start(p control.StartParams) (int, error) {
	if len(p.Args) == 0 || p.Args[0] == "" {
		return 0, control.Errorf(control.CodeInvalidParams, "start: no args")
	}
	select {
	case <-h.closed:
		return 0, control.Errorf(control.CodeFailed, "start: handler closed")
	default:
	}
	env := h.buildEnv(p.Env)
	path, err := lookPath(p.Args[0], env, p.Cwd)
	if err != nil {
		return 0, control.Errorf(control.CodeFailed, "start %s: %v", p.Args[0], err)
	}
	pr := &process{terminal: p.Terminal, done: make(chan struct{})}
	child, parent, err := pr.openStdio(p)
	if err != nil {
		return 0, control.Errorf(control.CodeFailed, "start %s: %v", p.Args[0], err)
	}
	attr := &os.ProcAttr{Dir: p.Cwd, Env: env, Files: child, Sys: sysProcAttr(p)}
	start := func() (int, error) {
		proc, err := os.StartProcess(path, p.Args, attr)
		if err != nil {
			return 0, err
		}
		pr.proc = proc
		return proc.Pid, nil
	}
	var exited <-chan unix.WaitStatus
	var pid int
	if h.opts.Reaper != nil {
		pid, exited, err = h.opts.Reaper.Start(start)
	} else {
		pid, err = start()
	}
	for _, f := range child {
		_ = f.Close()
	}
	if err != nil {
		for _, f := range parent {
			_ = f.Close()
		}
		return 0, control.Errorf(control.CodeFailed, "start %s: %v", p.Args[0], err)
	}
	pr.pid = pid
	h.procMu.Lock()
	h.procs[pid] = pr
	h.procMu.Unlock()

	h.follow(pr, p, parent)
	go h.waitExit(pr, exited)
	return pid, nil
}

// follow pumps a started process's output (and the log FIFO, when it
// asked for it) into events.
func (h *Handler) follow(pr *process, p control.StartParams, parent []*os.File) {
	if p.Terminal {
		pr.outputs.Add(1)
		go h.pump(pr, control.StreamStdout, pr.pty)
	} else {
		pr.outputs.Add(2)
		go h.pump(pr, control.StreamStdout, parent[1])
		go h.pump(pr, control.StreamStderr, parent[2])
	}
	h.maybeOpenLog(pr, p)
}

// maybeOpenLog opens the log FIFO for a process that asked for it; a
// process runs without one rather than not at all.
func (h *Handler) maybeOpenLog(pr *process, p control.StartParams) {
	if !p.Log || p.Terminal {
		return
	}
	if err := h.openLog(pr); err != nil {
		h.log.Warn("control: the log FIFO", "path", h.opts.LogFIFO, "err", err)
	}
}

// openLog makes the log FIFO (writable by every user, readable by root)
// and forwards what is written to it as pr's stdout until pr's exit. It
// is opened read-write, so it never ends while writers come and go.
func (h *Handler) openLog(pr *process) error {
	path := h.opts.LogFIFO
	_ = os.Remove(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := unix.Mkfifo(path, 0o622); err != nil {
		return err
	}
	if err := os.Chmod(path, 0o622); err != nil { // past the umask
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	go func() {
		<-pr.done
		_ = f.Close()
	}()
	go h.copyOutput(pr, control.StreamStdout, f) // not in pr.outputs: it never ends by itself
	return nil
}

// openStdio returns the child's stdin/stdout/stderr and the parent's
// ends ([stdin writer, stdout reader, stderr reader], or the pty master).
func (pr *process) openStdio(p control.StartParams) (child, parent []*os.File, err error) {
	if p.Terminal {
		m, s, err := openPTY(p.Cols, p.Rows)
		if err != nil {
			return nil, nil, err
		}
		pr.pty, pr.stdin = m, m
		return []*os.File{s, s, s}, []*os.File{m}, nil
	}
	var files [6]*os.File // r0 w0 r1 w1 r2 w2
	for i := 0; i < 3; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			for _, f := range files[:2*i] {
				_ = f.Close()
			}
			return nil, nil, err
		}
		files[2*i], files[2*i+1] = r, w
	}
	pr.stdin = files[1]
	return []*os.File{files[0], files[3], files[5]}, []*os.File{files[1], files[2], files[4]}, nil
}

func sysProcAttr(p control.StartParams) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{}
	if p.Terminal {
		a.Setsid, a.Setctty, a.Ctty = true, true, 0
	} else {
		a.Setpgid = true
	}
	if p.UID != nil || p.GID != nil {
		c := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), NoSetGroups: os.Getuid() != 0}
		if p.UID != nil {
			c.Uid = *p.UID
		}
		if p.GID != nil {
			c.Gid = *p.GID
		}
		a.Credential = c
	}
	return a
}

// buildEnv is DefaultPath, then the identity's env, then the request's
// ("K=V"; later wins, order of first appearance kept).
func (h *Handler) buildEnv(req []string) []string {
	var keys []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	set("PATH", DefaultPath)
	idEnv := h.store.Env()
	idKeys := make([]string, 0, len(idEnv))
	for k := range idEnv {
		idKeys = append(idKeys, k)
	}
	slices.Sort(idKeys)
	for _, k := range idKeys {
		set(k, idEnv[k])
	}
	for _, kv := range req {
		k, v, _ := strings.Cut(kv, "=")
		if k != "" {
			set(k, v)
		}
	}
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, k+"="+vals[k])
	}
	return env
}

// lookPath resolves a command name on the PATH of env (not the agent's).
func lookPath(name string, env []string, cwd string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathEnv := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) && cwd != "" {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable file not found in PATH %q", pathEnv)
}

// pump forwards one output stream as events until EOF (or EIO: a pty
// whose last slave is closed).
func (h *Handler) pump(pr *process, stream string, f *os.File) {
	defer pr.outputs.Done()
	defer f.Close()
	h.copyOutput(pr, stream, f)
}

// copyOutput emits what f gives as pr's output on stream until f ends.
func (h *Handler) copyOutput(pr *process, stream string, f *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			pr.progress.Add(1)
			pr.emitting.Add(1)
			h.ev.emit(queuedEvent{out: &control.OutputEvent{PID: pr.pid, Stream: stream, Data: slices.Clone(buf[:n])}})
			pr.emitting.Add(-1)
			pr.progress.Add(1)
		}
		if err != nil {
			return
		}
	}
}

// waitExit waits for the process, lets its output drain, emits the exit
// event and makes the status available to wait.
func (h *Handler) waitExit(pr *process, exited <-chan unix.WaitStatus) {
	var ws unix.WaitStatus
	if exited != nil {
		ws = <-exited
		_ = pr.proc.Release()
	} else {
		st, err := pr.proc.Wait()
		if err != nil {
			h.log.Error("control: wait", "pid", pr.pid, "err", err)
			ws = unix.WaitStatus(0xff << 8) // exit 255
		} else {
			ws = unix.WaitStatus(st.Sys().(syscall.WaitStatus))
		}
	}
	pr.drainOutput()
	pr.status = exitStatusOf(pr.pid, ws)
	h.ev.emit(queuedEvent{exit: &pr.status})
	close(pr.done)
	if !pr.terminal {
		pr.enqueueStdin(stdinOp{close: true}) // free the pipe; queued writes go first
	}
	h.retire(pr)
}

func (pr *process) drainOutput() {
	drained := make(chan struct{})
	go func() { pr.outputs.Wait(); close(drained) }()
	last := pr.progress.Load()
	for {
		select {
		case <-drained:
			return
		case <-time.After(outputIdle):
			cur := pr.progress.Load()
			if cur == last && pr.emitting.Load() == 0 {
				return // a descendant keeps the stream open: do not wait for it
			}
			last = cur
		}
	}
}

func exitStatusOf(pid int, ws unix.WaitStatus) control.ExitStatus {
	switch {
	case ws.Exited():
		return control.ExitStatus{PID: pid, Status: ws.ExitStatus()}
	case ws.Signaled():
		sig := int(ws.Signal())
		return control.ExitStatus{PID: pid, Status: 128 + sig, Signal: sig}
	}
	return control.ExitStatus{PID: pid, Status: 255}
}

// retire keeps the last MaxExited exited processes waitable.
func (h *Handler) retire(pr *process) {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	h.exited = append(h.exited, pr)
	for len(h.exited) > h.opts.MaxExited {
		old := h.exited[0]
		h.exited = h.exited[1:]
		if h.procs[old.pid] == old {
			delete(h.procs, old.pid)
		}
	}
}

func (h *Handler) lookup(pid int) (*process, error) {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	if pr, ok := h.procs[pid]; ok {
		return pr, nil
	}
	return nil, control.Errorf(control.CodeNotFound, "no process %d", pid)
}

func (h *Handler) waitMethod(ctx context.Context, raw json.RawMessage) (any, error) {
	var p control.PIDParams
	if e := control.DecodeParams(raw, &p); e != nil {
		return nil, e
	}
	return h.Wait(ctx, p.PID)
}

// Wait blocks until the process has exited (and its exit event has been
// emitted); it returns at once for a process that already has.
func (h *Handler) Wait(ctx context.Context, pid int) (control.ExitStatus, error) {
	pr, err := h.lookup(pid)
	if err != nil {
		return control.ExitStatus{}, err
	}
	select {
	case <-pr.done:
		return pr.status, nil
	case <-ctx.Done():
		return control.ExitStatus{}, control.Errorf(control.CodeCanceled, "wait %d: %v", pid, ctx.Err())
	}
}

func (h *Handler) signalMethod(_ context.Context, raw json.RawMessage) (any, error) {
	var p control.SignalParams
	if e := control.DecodeParams(raw, &p); e != nil {
		return nil, e
	}
	return struct{}{}, h.Signal(p)
}

// Signal sends a signal to a process started by start (or its group).
func (h *Handler) Signal(p control.SignalParams) error {
	pr, err := h.lookup(p.PID)
	if err != nil {
		return err
	}
	if p.Signal < 0 || p.Signal > 64 {
		return control.Errorf(control.CodeInvalidParams, "signal %d", p.Signal)
	}
	select {
	case <-pr.done:
		return control.Errorf(control.CodeFailed, "signal %d: process already exited", p.PID)
	default:
	}
	if p.Group {
		err = unix.Kill(-pr.pid, unix.Signal(p.Signal))
	} else {
		err = pr.proc.Signal(syscall.Signal(p.Signal))
	}
	if err != nil {
		return control.Errorf(control.CodeFailed, "signal %d: %v", p.PID, err)
	}
	return nil
}

func (pr *process) kill() {
	select {
	case <-pr.done:
	default:
		_ = pr.proc.Signal(syscall.SIGKILL)
	}
}

func (h *Handler) resizeMethod(_ context.Context, raw json.RawMessage) (any, error) {
	var p control.ResizeParams
	if e := control.DecodeParams(raw, &p); e != nil {
		return nil, e
	}
	pr, err := h.lookup(p.PID)
	if err != nil {
		return nil, err
	}
	if !pr.terminal {
		return nil, control.Errorf(control.CodeInvalidParams, "process %d has no terminal", p.PID)
	}
	if err := setWinsize(pr.pty, p.Cols, p.Rows); err != nil {
		return nil, control.Errorf(control.CodeFailed, "resize %d: %v", p.PID, err)
	}
	return struct{}{}, nil
}

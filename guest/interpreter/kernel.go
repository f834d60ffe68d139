package interpreter

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// kernelScript is the Python side of a context, run with `python3 -u -c`.
//
//go:embed kernel.py
var kernelScript string

const (
	// startTimeout bounds how long a new kernel may take to say "ready";
	// a cold python3 start on a loaded VM is well under a second.
	startTimeout = 20 * time.Second
	// maxLine caps one protocol line (a result can carry a large image).
	maxLine = 256 << 20
	// drainAfterExit is how long lines already written by a dead kernel are
	// still read before its message stream is declared finished.
	drainAfterExit = 500 * time.Millisecond
)

// kernel is one running kernel process (kernel.py, kernel.js or
// kernel_bash.py) serving one context.
type kernel struct {
	cmd    *exec.Cmd
	req    *os.File      // our write end of the kernel's fd 3
	msgs   chan []byte   // protocol lines from the kernel's fd 4; closed at EOF
	exited chan struct{} // closed once the process has been reaped
	diag   *tail         // the kernel's own stdout/stderr, for crash reports

	mu      sync.Mutex
	waitErr error
	reason  string            // set when we kill it on purpose (restart, delete)
	env     map[string]string // sandbox env last given to it, to spot changes
}

// startKernel launches the kernel argv in dir and waits until it is ready.
func startKernel(argv []string, dir string, env map[string]string) (*kernel, error) {
	// Checked first: exec reports a bad Dir as if the runtime were missing.
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("working directory %q is not a usable directory (create it, or pick another cwd)", dir)
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("request pipe: %w", err)
	}
	msgR, msgW, err := os.Pipe()
	if err != nil {
		closeAll(reqR, reqW)
		return nil, fmt.Errorf("message pipe: %w", err)
	}
	diagR, diagW, err := os.Pipe()
	if err != nil {
		closeAll(reqR, reqW, msgR, msgW)
		return nil, fmt.Errorf("diagnostics pipe: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = processEnv(env)
	// *os.File outputs keep Wait from waiting on pipes a user's background
	// process may hold open forever.
	cmd.Stdout, cmd.Stderr = diagW, diagW
	cmd.ExtraFiles = []*os.File{reqR, msgW} // fd 3, fd 4
	// Its own process group, so killing the kernel also ends what the
	// user's code started (and a terminal ^C never reaches it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	closeAll(reqR, msgW, diagW)
	if err != nil {
		closeAll(reqW, msgR, diagR)
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	k := &kernel{cmd: cmd, req: reqW, msgs: make(chan []byte, 64),
		exited: make(chan struct{}), diag: &tail{max: 4096}, env: env}
	go k.readMessages(msgR)
	go func() { _, _ = io.Copy(k.diag, diagR); diagR.Close() }()
	go k.wait(msgR)
	if err := k.awaitReady(); err != nil {
		k.kill("")
		return nil, err
	}
	return k, nil
}

// awaitReady waits for the kernel's first message.
func (k *kernel) awaitReady() error {
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case line, ok := <-k.msgs:
		if ok && messageType(line) == "ready" {
			return nil
		}
		k.kill("")
		<-k.exited
		return fmt.Errorf("kernel failed to start (%s)%s", k.exitStatus(), k.diag.suffix())
	case <-timer.C:
		return fmt.Errorf("kernel did not become ready within %s%s", startTimeout, k.diag.suffix())
	}
}

// wait reaps the process, then ends everything it left behind.
func (k *kernel) wait(msgR *os.File) {
	err := k.cmd.Wait()
	k.mu.Lock()
	k.waitErr = err
	k.mu.Unlock()
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
	// A forked child could keep fd 4 open; lines already written are read
	// until the deadline, then the reader gives up.
	_ = msgR.SetReadDeadline(time.Now().Add(drainAfterExit))
	k.req.Close()
	close(k.exited)
}

// readMessages forwards protocol lines until EOF or a read error.
func (k *kernel) readMessages(r *os.File) {
	defer close(k.msgs)
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br, maxLine)
		if len(line) > 0 && !k.deliver(line) {
			return
		}
		if err != nil {
			return
		}
	}
}

// deliver hands a line to the execution reading it. Once the process is
// gone a line nobody takes is dropped, so the reader cannot leak.
func (k *kernel) deliver(line []byte) bool {
	select {
	case k.msgs <- line:
		return true
	case <-k.exited:
	}
	t := time.NewTimer(drainAfterExit)
	defer t.Stop()
	select {
	case k.msgs <- line:
		return true
	case <-t.C:
		return false
	}
}

// readLine reads one '\n'-terminated line (without it). A line longer than
// limit is replaced by an error message, so one huge output cannot exhaust
// the agent's memory.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > limit {
				tooLong, line = true, nil
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			msg := errorMessage("OutputTooLarge", fmt.Sprintf("an output message exceeded %d bytes and was dropped", limit))
			line, _ = json.Marshal(msg)
			return line, err
		}
		return bytes.TrimSuffix(line, []byte{'\n'}), err
	}
}

// send writes one request line to the kernel.
func (k *kernel) send(req kernelRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode kernel request: %w", err)
	}
	if _, err := k.req.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write to kernel: %w", err)
	}
	return nil
}

// interrupt raises KeyboardInterrupt in the running cell, like Jupyter's
// interrupt button; the kernel ignores it between cells.
func (k *kernel) interrupt() {
	_ = k.cmd.Process.Signal(syscall.SIGINT)
}

// kill ends the kernel and everything it started; reason, if set, is what
// a still-running execution reports.
func (k *kernel) kill(reason string) {
	k.mu.Lock()
	if k.reason == "" {
		k.reason = reason
	}
	k.mu.Unlock()
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
	_ = k.cmd.Process.Kill()
}

func (k *kernel) hasExited() bool {
	select {
	case <-k.exited:
		return true
	default:
		return false
	}
}

// exitStatus describes how the process ended, for error messages.
func (k *kernel) exitStatus() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.waitErr == nil {
		return "exit status 0"
	}
	return k.waitErr.Error()
}

func (k *kernel) killReason() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reason
}

// processEnv is the kernel's environment: the agent's own, the sandbox's on
// top, and a usable PATH even when the agent runs as PID 1 without one.
func processEnv(extra map[string]string) []string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range extra {
		env[k] = v
	}
	if env["PATH"] == "" {
		env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// suffix is ": <last output>" or "" when the kernel printed nothing.
func (t *tail) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return ": " + s
}

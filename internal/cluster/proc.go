package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// proc is one cluster process (etcd, an API server, a kubelet, ...): its
// own process group, its log under the cluster directory, and killed if
// the harness dies (Pdeathsig, from a thread held as long as it runs).
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startProc starts bin with args, logging to <dir>/logs/<name>.log.
func startProc(dir, name, bin string, args []string, env []string) (*proc, error) {
	logPath := filepath.Join(dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	err = crienv.StartHeld(cmd, func(err error) {
		logf.Close()
		p.err = err
		close(p.done)
	})
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

// exited reports whether the process ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// kill ends it at once (a node failure in a test).
func (p *proc) kill() {
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail is the end of the process's log, for errors.
func (p *proc) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// waitFor polls ok until it returns nil, the process exits, or timeout.
func (p *proc) waitFor(timeout time.Duration, what string, ok func() error) error {
	err := poll.Within(timeout, p.name+": "+what, func() error {
		err := ok()
		if err != nil && p.exited() {
			return poll.Stop(fmt.Errorf("%s exited (%v) before %s", p.name, p.err, what))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%w; its log ends:\n%s", err, p.tail())
	}
	return nil
}

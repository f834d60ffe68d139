package interpreter

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"
)

const (
	// interruptEvery repeats SIGINT while a cell has not stopped: a single
	// one can land before the cell starts, or be swallowed by user code.
	interruptEvery = 300 * time.Millisecond
	// interruptGrace is how long an abandoned cell may take to stop before
	// its kernel is killed (and replaced on the next request).
	interruptGrace = 5 * time.Second
)

// Reasons a kernel is killed on purpose; the execution that was running
// reports the first as the E2B server does.
const (
	reasonRestart = "ContextRestarting"
	reasonDelete  = "ContextDeleted"
	reasonClosed  = "InterpreterShutdown"
)

// codeContext is one E2B context: a kernel, started on demand, and the
// turn that serializes its executions.
type codeContext struct {
	id   string
	lang string // langPython, langJavaScript, ...
	cwd  string
	srv  *Server
	turn chan struct{} // capacity 1; holding it is the right to execute

	mu   sync.Mutex
	k    *kernel
	gone string // set once deleted or shut down: the error name to report
}

func (c *codeContext) info() Context {
	return Context{ID: c.id, Language: c.lang, Cwd: c.cwd}
}

// acquire waits for the context's turn, or for the client to give up.
func (c *codeContext) acquire(ctx context.Context) error {
	select {
	case c.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *codeContext) release() { <-c.turn }

// ensureKernel returns the running kernel, starting one if there is none.
// notice is set when a previous kernel had died while idle, because the
// user's state went with it.
func (c *codeContext) ensureKernel() (k *kernel, notice string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone != "" {
		return nil, "", fmt.Errorf("context %s no longer exists (%s)", c.id, c.gone)
	}
	if c.k != nil && !c.k.hasExited() {
		return c.k, "", nil
	}
	if c.k != nil {
		notice = fmt.Sprintf("sandlot: the %s kernel of this context had exited (%s); "+
			"a new one was started, so earlier variables and imports are gone\n", c.lang, c.k.exitStatus())
		c.k = nil
	}
	c.k, err = c.start()
	if err != nil {
		return nil, notice, fmt.Errorf("start %s kernel for context %s: %w", c.lang, c.id, err)
	}
	return c.k, notice, nil
}

// start launches a kernel of the context's language.
func (c *codeContext) start() (*kernel, error) {
	argv, err := c.srv.kernelCommand(c.lang)
	if err != nil {
		return nil, err
	}
	return startKernel(argv, c.cwd, c.srv.sandboxEnv())
}

// restart replaces the kernel with a fresh one; a running execution ends
// with a ContextRestarting error.
func (c *codeContext) restart() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone != "" {
		return fmt.Errorf("context %s no longer exists (%s)", c.id, c.gone)
	}
	if c.k != nil {
		c.k.kill(reasonRestart)
		c.k = nil
	}
	k, err := c.start()
	if err != nil {
		return fmt.Errorf("restart %s kernel for context %s: %w", c.lang, c.id, err)
	}
	c.k = k
	return nil
}

// shutdown kills the kernel for good (context deleted, server closed).
func (c *codeContext) shutdown(reason string) {
	c.mu.Lock()
	c.gone = reason
	k := c.k
	c.k = nil
	c.mu.Unlock()
	if k != nil {
		k.kill(reason)
	}
}

// drop kills k and forgets it, so the next request starts a new kernel.
func (c *codeContext) drop(k *kernel) {
	c.mu.Lock()
	if c.k == k {
		c.k = nil
	}
	c.mu.Unlock()
	k.kill("")
}

// execute runs one cell and streams its messages to out; it returns when
// the cell is done, or has been interrupted because the client left.
func (c *codeContext) execute(ctx context.Context, req kernelRequest, out *stream) {
	if c.acquire(ctx) != nil {
		return // the client gave up while waiting for its turn
	}
	defer c.release()
	k, notice, err := c.ensureKernel()
	if notice != "" {
		_ = out.message(stderrMessage(notice))
	}
	if err != nil {
		_ = out.message(errorMessage("KernelError", err.Error()))
		return
	}
	req.Globals = c.envUpdate(k)
	if err := k.send(req); err != nil {
		c.lost(k, out)
		return
	}
	c.stream(ctx, k, out)
}

// envUpdate is the sandbox env if it changed since k got it (a restored
// snapshot gets a new identity), else nil.
func (c *codeContext) envUpdate(k *kernel) map[string]string {
	env := c.srv.sandboxEnv()
	k.mu.Lock()
	defer k.mu.Unlock()
	if maps.Equal(env, k.env) {
		return nil
	}
	k.env = env
	return env
}

// stream forwards the kernel's messages until the cell is done.
func (c *codeContext) stream(ctx context.Context, k *kernel, out *stream) {
	for {
		select {
		case line, ok := <-k.msgs:
			if !ok {
				c.lost(k, out)
				return
			}
			switch messageType(line) {
			case "done":
				return
			case "ready":
				continue
			}
			// Flush when nothing else is queued: live output without one
			// syscall per line of a fast print loop.
			if out.line(line, len(k.msgs) == 0) != nil {
				c.interrupt(k)
				return
			}
		case <-ctx.Done():
			c.interrupt(k)
			return
		}
	}
}

// interrupt stops a cell whose client is gone, keeping the kernel (and the
// user's state) when the cell stops in time.
func (c *codeContext) interrupt(k *kernel) {
	k.interrupt()
	tick := time.NewTicker(interruptEvery)
	defer tick.Stop()
	giveUp := time.NewTimer(interruptGrace)
	defer giveUp.Stop()
	for {
		select {
		case line, ok := <-k.msgs:
			if !ok {
				c.drop(k)
				return
			}
			if messageType(line) == "done" {
				return
			}
		case <-tick.C:
			k.interrupt()
		case <-giveUp.C:
			c.drop(k)
			return
		}
	}
}

// lost reports a kernel that went away mid-execution and forgets it.
func (c *codeContext) lost(k *kernel, out *stream) {
	select { // the exit status makes the error message useful
	case <-k.exited:
	case <-time.After(2 * time.Second):
	}
	c.drop(k)
	_ = out.message(errorMessage(lostReason(k)))
}

// lostReason is the error name and value an execution reports when its
// kernel is gone.
func lostReason(k *kernel) (string, string) {
	switch r := k.killReason(); r {
	case "":
		return "KernelDied", fmt.Sprintf("the kernel exited unexpectedly (%s)%s; "+
			"this context's variables are lost and the next execution starts a fresh kernel",
			k.exitStatus(), k.diag.suffix())
	case reasonRestart:
		return r, "Context was restarted"
	case reasonDelete:
		return r, "Context was deleted"
	default:
		return r, "The code interpreter was shut down"
	}
}

package shim

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/fifo"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandlot-dev/sandlot/guest/control"
)

// stdio are the FIFOs containerd gave a process.
type stdio struct {
	Stdin, Stdout, Stderr string
	Terminal              bool
}

// process is a container's init process or an exec: a process inside the
// VM (a guest PID) or, for the pause container, nothing at all.
type process struct {
	id    string // exec ID, "" for init
	stdio stdio
	spec  *specs.Process // an exec's

	mu       sync.Mutex
	guestPID int
	state    procState
	exit     uint32
	exitedAt time.Time
	done     chan struct{}
	onExit   func(*process)
	// stdout and stderr stay open across restores in place: CRI's log
	// reader ends at the FIFO's EOF.
	stdout, stderr io.WriteCloser
	// gen counts attachments; a pump of an older one (a VM replaced by a
	// restore) ends without recording an exit.
	gen int
	// fed is closed when the stdin feed ends (nil: no feed).
	fed chan struct{}
}

func newProcess(id string, io stdio, onExit func(*process)) *process {
	return &process{id: id, stdio: io, state: procCreated, done: make(chan struct{}), onExit: onExit}
}

// move changes the state as procTransitions allow (p.mu is held).
func (p *process) move(to procState) error {
	next, err := nextProc(p.state, to)
	p.state = next
	return err
}

// beginStart claims the process for a Start: a second Start, or one of
// an exited process, is refused.
func (p *process) beginStart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.move(procStarting); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// abortStart gives a failed Start's process back, to be started again
// (unless it was killed meanwhile).
func (p *process) abortStart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == procStarting {
		p.state = procCreated
	}
}

// runNothing marks the pause container's process running: it has none.
func (p *process) runNothing() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.move(procRunning)
}

// run attaches to a guest process: its output goes to the FIFOs, its
// stdin comes from one, and its exit is recorded.
func (p *process) run(ctx context.Context, g guest, gp guestProcess) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := nextProc(p.state, procRunning); err != nil {
		gp.Close()
		return fmt.Errorf("attach to guest process %d: %w", gp.PID, err)
	}
	first := p.stdout == nil
	if first {
		if err := p.openOutput(ctx); err != nil {
			gp.Close()
			return err
		}
	}
	p.gen++
	p.guestPID, p.state = gp.PID, procRunning
	go p.pump(p.gen, gp.Events, gp.Close)
	if first && p.stdio.Stdin != "" {
		p.fed = make(chan struct{})
		go p.feed(g, gp.PID, p.fed)
	}
	return nil
}

// detach stops following the guest process (its VM is being replaced):
// the pump of the old VM ends without recording an exit.
func (p *process) detach() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == procRunning {
		p.gen++
		p.state = procDetached
	}
}

// openOutput opens the FIFOs containerd reads (or discards output when
// it gave none).
func (p *process) openOutput(ctx context.Context) error {
	open := func(path string) (io.WriteCloser, error) {
		if path == "" {
			return nopCloser{io.Discard}, nil
		}
		return fifo.OpenFifo(ctx, path, syscall.O_WRONLY, 0)
	}
	out, err := open(p.stdio.Stdout)
	if err != nil {
		return fmt.Errorf("open stdout: %w", err)
	}
	errw, err := open(p.stdio.Stderr)
	if err != nil {
		out.Close()
		return fmt.Errorf("open stderr: %w", err)
	}
	p.stdout, p.stderr = out, errw
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// pump copies the guest's output events to the FIFOs until the exit
// event, then records the exit: a waiter sees all output in the log.
// Nothing here buffers: while containerd does not read a FIFO the write
// blocks and so does this pump, and the guest's output meanwhile queues in
// the event subscription only up to its bound (control.Subscription), the
// rest dropped there. The FIFOs carry the process's own bytes, so a loss
// (ev.Dropped) is not written into them.
func (p *process) pump(gen int, events <-chan control.Event, closeEvents func()) {
	status := exitVMGone // the events end without an exit: the VM went away
loop:
	for ev := range events {
		switch {
		case ev.Name == control.EventOutput && ev.Stream == control.StreamStderr:
			_, _ = p.stderr.Write(ev.Data)
		case ev.Name == control.EventOutput:
			_, _ = p.stdout.Write(ev.Data)
		case ev.Name == control.EventExit && ev.Exit != nil:
			status = uint32(ev.Exit.Status)
			break loop
		}
	}
	closeEvents()
	p.mu.Lock()
	current := p.gen == gen
	p.mu.Unlock()
	if current {
		p.exited(status)
	}
}

// exitVMGone is the exit status of processes whose VM went away (as if
// SIGKILLed): the VM crashed, or its shim was killed.
const exitVMGone = 128 + uint32(syscall.SIGKILL)

// feed copies the stdin FIFO to the guest; EOF closes the guest's stdin.
func (p *process) feed(g guest, pid int, fed chan struct{}) {
	defer close(fed)
	f, err := fifo.OpenFifo(context.Background(), p.stdio.Stdin, syscall.O_RDONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 && g.WriteStdin(context.Background(), pid, buf[:n]) != nil {
			return
		}
		if err != nil {
			_ = g.CloseStdin(context.Background(), pid)
			return
		}
	}
}

// stdinDrainWait bounds how long a CloseIO waits for the stdin feed to
// pass on what is already in the FIFO. containerd closes its end of the
// FIFO first and then calls CloseIO (CRI's exec with stdin), so the feed
// reaches EOF once it has sent everything; a writer that keeps its end
// open gets its close after this, and so does a guest that never reads
// its stdin (a var: tests shorten it).
var stdinDrainWait = 5 * time.Second

// drainStdin waits for the stdin feed to end: true when it has (its EOF
// closed the guest's stdin after the last byte), false when there is no
// feed or it still runs after stdinDrainWait. Closing the guest's stdin
// at once lost the bytes still in the FIFO: tar in the guest read an
// empty archive (kubectl sandlot cp).
func (p *process) drainStdin(ctx context.Context) bool {
	p.mu.Lock()
	fed := p.fed
	p.mu.Unlock()
	if fed == nil {
		return false
	}
	t := time.NewTimer(stdinDrainWait)
	defer t.Stop()
	select {
	case <-fed:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// exited records the exit once.
func (p *process) exited(status uint32) {
	p.mu.Lock()
	if p.move(procStopped) != nil {
		p.mu.Unlock()
		return // it had exited already
	}
	p.exit, p.exitedAt = status, time.Now()
	for _, w := range []io.WriteCloser{p.stdout, p.stderr} {
		if w != nil {
			w.Close()
		}
	}
	p.mu.Unlock()
	close(p.done)
	if p.onExit != nil {
		p.onExit(p)
	}
}

// wait blocks until the process exited or ctx ends.
func (p *process) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// snapshot is the process's state, consistent.
func (p *process) snapshot() (pid int, state procState, exit uint32, exitedAt time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.guestPID, p.state, p.exit, p.exitedAt
}

func (p *process) running() bool {
	_, st, _, _ := p.snapshot()
	return st.live()
}

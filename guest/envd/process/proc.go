package process

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
)

const (
	// readChunk is the largest data event the service sends.
	readChunk = 32 << 10
	// After the process has exited its output is read until EOF, but a
	// background grandchild may hold the pipe open for ever: reading
	// stops once the pipe has been idle for drainGrace, or reads have
	// waited drainBudget in all (a chatty grandchild).
	drainGrace  = 200 * time.Millisecond
	drainBudget = time.Second
	// drainTimeout bounds how long an exited process stays in the table
	// waiting for its subscribers to take their last events.
	drainTimeout = 30 * time.Second
)

type outputKind int

const (
	stdout outputKind = iota
	stderr
	ptyOut
)

// output is a host-side read end of the process's output.
type output struct {
	f    *os.File
	kind outputKind
}

// proc is a process the service started, and the fan-out of its events.
type proc struct {
	pid    uint32
	tag    *string
	seq    uint64
	config *processpb.ProcessConfig
	cmd    *exec.Cmd

	tty     *os.File // PTY master; nil without a PTY
	outputs []output
	readers sync.WaitGroup

	inMu sync.Mutex // serialises writes so concurrent inputs don't interleave

	mu       sync.Mutex
	stdin    *os.File // write end of the stdin pipe; nil if absent or closed
	hadStdin bool
	exited   bool
	subs     map[*subscriber]struct{}
	end      *processpb.ProcessEvent
	exit     chan struct{} // closed once the process has exited
	ended    chan struct{} // closed once the end event is published
}

func newProc(cmd *exec.Cmd) *proc {
	return &proc{cmd: cmd, subs: map[*subscriber]struct{}{}, exit: make(chan struct{}), ended: make(chan struct{})}
}

func (p *proc) info() *processpb.ProcessInfo {
	return &processpb.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag}
}

func (p *proc) hasExited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// run reads the output, waits for the process and publishes its end; then,
// once the subscribers attached at that moment have taken everything,
// calls onDone (which removes it from the table).
func (p *proc) run(onDone func()) {
	defer onDone()
	for _, o := range p.outputs {
		p.readers.Add(1)
		go p.read(o)
	}
	waitExit(int(p.pid))
	p.mu.Lock()
	p.exited = true
	p.closeStdinLocked()
	p.mu.Unlock()
	err := p.cmd.Wait()
	close(p.exit)
	deadline := time.Now().Add(drainGrace)
	for _, o := range p.outputs {
		_ = o.f.SetReadDeadline(deadline) // bounds a read already waiting on an idle pipe
	}
	p.readers.Wait()
	p.closeFiles()
	end := endEvent(p.cmd.ProcessState, err)
	slog.Info("process ended", "pid", p.pid, "exitCode", end.GetEnd().GetExitCode(), "status", end.GetEnd().GetStatus())
	p.awaitSubscribers(p.finish(end))
}

// waitExit blocks until pid has exited, without reaping it: until the
// process is marked exited (under p.mu) the zombie keeps its pid, and so
// its process group id, from being reused — a signal sent to the group
// cannot reach an unrelated process.
func waitExit(pid int) {
	var info unix.Siginfo
	for {
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != unix.EINTR {
			return
		}
	}
}

func (p *proc) read(o output) {
	defer p.readers.Done()
	buf := make([]byte, readChunk)
	for budget := drainBudget; budget > 0; {
		draining := isClosed(p.exit)
		if draining {
			_ = o.f.SetReadDeadline(time.Now().Add(min(drainGrace, budget)))
		}
		t0 := time.Now()
		n, err := o.f.Read(buf)
		if draining {
			budget -= time.Since(t0)
		}
		if n > 0 {
			p.publish(dataEvent(o.kind, bytes.Clone(buf[:n])), n)
		}
		if err != nil {
			return // EOF; EIO from a PTY whose slave is closed; the drain deadline
		}
	}
}

// publish queues ev for every subscriber. It may wait for a subscriber
// with a full buffer (see stallTimeout), so it runs without p.mu: input,
// signals and new subscribers must not wait behind a slow client.
func (p *proc) publish(ev *processpb.ProcessEvent, size int) {
	p.mu.Lock()
	subs := slices.Collect(maps.Keys(p.subs))
	p.mu.Unlock()
	for _, sub := range subs {
		if !sub.push(ev, size) {
			p.mu.Lock()
			delete(p.subs, sub)
			p.mu.Unlock()
		}
	}
}

// finish publishes the end event and returns the subscribers it reached.
func (p *proc) finish(ev *processpb.ProcessEvent) []*subscriber {
	p.mu.Lock()
	defer p.mu.Unlock()
	var reached []*subscriber
	for sub := range p.subs {
		if sub.push(ev, 0) {
			reached = append(reached, sub)
		}
	}
	p.subs = map[*subscriber]struct{}{}
	p.end = ev
	close(p.ended)
	return reached
}

func (p *proc) awaitSubscribers(subs []*subscriber) {
	timeout := time.NewTimer(drainTimeout)
	defer timeout.Stop()
	for _, sub := range subs {
		select {
		case <-sub.done:
		case <-timeout.C:
			return
		}
	}
}

// subscribe attaches a new subscriber: its first event is start, then
// everything from now on (just start and end if the process has ended).
func (p *proc) subscribe() *subscriber {
	sub := newSubscriber()
	sub.push(startEvent(p.pid), 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		sub.push(p.end, 0)
	} else {
		p.subs[sub] = struct{}{}
	}
	return sub
}

// unsubscribe detaches sub once its stream stops reading.
func (p *proc) unsubscribe(sub *subscriber) {
	p.mu.Lock()
	delete(p.subs, sub)
	p.mu.Unlock()
	close(sub.done)
}

var errExited = errors.New("process has exited")

// signal sends sig to the process's group (it leads one: Setpgid/Setsid),
// so a shell's children get it too.
func (p *proc) signal(sig unix.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return errExited
	}
	err := unix.Kill(-int(p.pid), sig)
	if errors.Is(err, unix.ESRCH) {
		err = unix.Kill(int(p.pid), sig) // it moved itself to another group
	}
	return err
}

func (p *proc) closeStdinLocked() {
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
}

func (p *proc) closeFiles() {
	p.mu.Lock()
	p.closeStdinLocked()
	p.mu.Unlock()
	for _, o := range p.outputs {
		_ = o.f.Close()
	}
	if p.tty != nil {
		_ = p.tty.Close() // also one of outputs; a second Close is harmless
	}
}

func startEvent(pid uint32) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: pid}}}
}

func dataEvent(kind outputKind, b []byte) *processpb.ProcessEvent {
	d := &processpb.ProcessEvent_DataEvent{}
	switch kind {
	case stdout:
		d.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	case stderr:
		d.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		d.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: b}
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: d}}
}

// endEvent reports the exit as envd does: status and error as Go prints
// them ("exit status 1", "signal: killed"), exitCode -1 after a signal.
func endEvent(st *os.ProcessState, err error) *processpb.ProcessEvent {
	end := &processpb.ProcessEvent_EndEvent{ExitCode: -1, Status: "unknown"}
	if st != nil {
		end.ExitCode, end.Exited, end.Status = int32(st.ExitCode()), st.Exited(), st.String()
	}
	if err != nil {
		end.Error = proto.String(err.Error())
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}}
}

func keepaliveEvent() *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}
}

package pid1

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// maxUnclaimed bounds the exit statuses kept for pids nobody registered.
const maxUnclaimed = 1024

// Reaper is the one place that waits for children: a SIGCHLD loop calling
// wait4(-1) that dispatches each exit status to whoever registered the
// pid, and simply discards orphans (processes re-parented to PID 1).
//
// Nothing else in the process may wait for children (os/exec's Cmd.Wait,
// os.Process.Wait): the reaper would steal their statuses and they would
// fail with ECHILD. Instead start children with Start, which holds off
// the reaper while forking, so a child that exits at once is still
// delivered to its registered channel; or Register a pid after the fact
// (a status reaped before Register is kept, bounded, and handed over).
//
// A test process (not PID 1) can use a Reaper after
// prctl(PR_SET_CHILD_SUBREAPER) so that orphans come to it.
type Reaper struct {
	// forkMu: Start holds it shared while forking and registering, a reap
	// pass holds it exclusively, so no child is reaped unregistered.
	forkMu sync.RWMutex

	mu             sync.Mutex
	waiters        map[int][]chan unix.WaitStatus
	unclaimed      map[int]unix.WaitStatus
	unclaimedOrder []int

	orphans atomic.Int64
}

// NewReaper returns a Reaper; call Run (or Reap) to reap.
func NewReaper() *Reaper {
	return &Reaper{waiters: map[int][]chan unix.WaitStatus{}, unclaimed: map[int]unix.WaitStatus{}}
}

// Run reaps on every SIGCHLD until ctx is done.
func (r *Reaper) Run(ctx context.Context) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	defer signal.Stop(sig)
	for {
		r.Reap()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sig:
		}
	}
}

// Reap collects every child that has exited, without blocking, and
// returns how many it collected.
func (r *Reaper) Reap() int {
	r.forkMu.Lock()
	defer r.forkMu.Unlock()
	n := 0
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return n
		}
		n++
		r.dispatch(pid, ws)
	}
}

func (r *Reaper) dispatch(pid int, ws unix.WaitStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if chs, ok := r.waiters[pid]; ok {
		delete(r.waiters, pid)
		for _, ch := range chs {
			ch <- ws // buffered, one status per channel
		}
		return
	}
	r.orphans.Add(1)
	if _, ok := r.unclaimed[pid]; !ok {
		r.unclaimedOrder = append(r.unclaimedOrder, pid)
	}
	r.unclaimed[pid] = ws
	for len(r.unclaimedOrder) > maxUnclaimed {
		delete(r.unclaimed, r.unclaimedOrder[0])
		r.unclaimedOrder = r.unclaimedOrder[1:]
	}
}

// Register returns a channel that receives pid's exit status once. If the
// reaper already collected pid unclaimed, the status is delivered at once.
func (r *Reaper) Register(pid int) <-chan unix.WaitStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan unix.WaitStatus, 1)
	if ws, ok := r.unclaimed[pid]; ok {
		r.forgetUnclaimed(pid)
		ch <- ws
		return ch
	}
	r.waiters[pid] = append(r.waiters[pid], ch)
	return ch
}

// Start runs start, which must fork exactly one child and return its pid,
// with the reaper held off, and returns the channel that receives the
// child's exit status. It implements control.Reaper.
func (r *Reaper) Start(start func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.forkMu.RLock()
	defer r.forkMu.RUnlock()
	pid, err := start()
	if err != nil {
		return 0, nil, err
	}
	r.mu.Lock()
	r.forgetUnclaimed(pid) // a stale status of an earlier process with this pid
	ch := make(chan unix.WaitStatus, 1)
	r.waiters[pid] = append(r.waiters[pid], ch)
	r.mu.Unlock()
	return pid, ch, nil
}

func (r *Reaper) forgetUnclaimed(pid int) {
	if _, ok := r.unclaimed[pid]; !ok {
		return
	}
	delete(r.unclaimed, pid)
	for i, p := range r.unclaimedOrder {
		if p == pid {
			r.unclaimedOrder = append(r.unclaimedOrder[:i:i], r.unclaimedOrder[i+1:]...)
			break
		}
	}
}

// Orphans counts the children reaped with nobody registered for them.
func (r *Reaper) Orphans() int64 { return r.orphans.Load() }

package shim

import (
	"fmt"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
)

// procState is where a task's process is in its life. It is finer than
// containerd's task.Status (taskStatus maps it at the API boundary): a
// start under way, or a VM being replaced under a running process, are
// states of their own so a second Start or a stale exit is refused.
type procState string

const (
	procCreated  procState = "created"  // not started
	procStarting procState = "starting" // Start is asking the guest to run it
	procRunning  procState = "running"  // follows a guest process (the pause container's: nothing)
	procDetached procState = "detached" // its VM is being replaced by a restore in place
	procStopped  procState = "stopped"  // exited; the exit status is recorded
)

// procTransitions lists every legal move; anything else is an error.
// Created goes to Running without Starting when a restore in place
// adopts the snapshot's process before the container was started.
var procTransitions = map[procState][]procState{
	procCreated:  {procStarting, procRunning, procStopped},
	procStarting: {procRunning, procCreated, procStopped},
	procRunning:  {procDetached, procStopped},
	procDetached: {procRunning, procStopped},
	procStopped:  {},
}

// errProcTransition is a move procTransitions forbids. containerd sees a
// failed precondition: the call does not fit the process's state.
type errProcTransition struct{ from, to procState }

func (e *errProcTransition) Error() string {
	return fmt.Sprintf("process is %s, cannot become %s", e.from, e.to)
}

func (e *errProcTransition) Unwrap() error { return errdefs.ErrFailedPrecondition }

// nextProc returns to when from may move there.
func nextProc(from, to procState) (procState, error) {
	for _, s := range procTransitions[from] {
		if s == to {
			return to, nil
		}
	}
	return from, &errProcTransition{from: from, to: to}
}

// taskStatus is the state as containerd's task API reports it (PAUSED
// comes from the VM, not the process: see service.State).
func (s procState) taskStatus() task.Status {
	switch s {
	case procCreated, procStarting:
		return task.Status_CREATED
	case procRunning, procDetached:
		return task.Status_RUNNING
	case procStopped:
		return task.Status_STOPPED
	}
	return task.Status_UNKNOWN
}

// live: the process runs in containerd's eyes (a Detached one follows
// the restored VM's process in a moment).
func (s procState) live() bool { return s.taskStatus() == task.Status_RUNNING }

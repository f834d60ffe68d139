package shim

import (
	"errors"
	"slices"
	"testing"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
)

// TestProcTransitions: every pair of states is allowed exactly when the
// table lists it; a refusal is a failed precondition naming both.
func TestProcTransitions(t *testing.T) {
	states := []procState{procCreated, procStarting, procRunning, procDetached, procStopped}
	for _, from := range states {
		for _, to := range states {
			got, err := nextProc(from, to)
			allowed := slices.Contains(procTransitions[from], to)
			switch {
			case allowed && (err != nil || got != to):
				t.Errorf("%s -> %s: %v, %v; want allowed", from, to, got, err)
			case !allowed && (err == nil || got != from || !errors.Is(err, errdefs.ErrFailedPrecondition)):
				t.Errorf("%s -> %s: %v, %v; want a failed precondition", from, to, got, err)
			}
		}
	}
	if len(procTransitions[procStopped]) != 0 {
		t.Error("a stopped process can move")
	}
}

// TestTaskStatus: what containerd sees of each state.
func TestTaskStatus(t *testing.T) {
	for s, want := range map[procState]task.Status{
		procCreated: task.Status_CREATED, procStarting: task.Status_CREATED, procRunning: task.Status_RUNNING,
		procDetached: task.Status_RUNNING, procStopped: task.Status_STOPPED, "bogus": task.Status_UNKNOWN,
	} {
		if got := s.taskStatus(); got != want {
			t.Errorf("%s: %v, want %v", s, got, want)
		}
	}
}

// TestProcessStates: the process's own moves, outside the service.
func TestProcessStates(t *testing.T) {
	var exits int
	p := newProcess("", stdio{}, func(*process) { exits++ })
	if err := p.beginStart(); err != nil {
		t.Fatal(err)
	}
	if err := p.beginStart(); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("second start: %v", err)
	}
	p.abortStart()
	if _, st, _, _ := p.snapshot(); st != procCreated {
		t.Fatalf("after a failed start: %s", st)
	}
	p.detach() // not running: nothing to detach from
	if _, st, _, _ := p.snapshot(); st != procCreated {
		t.Fatalf("detached while created: %s", st)
	}
	p.exited(1)
	p.exited(2)
	if _, st, exit, _ := p.snapshot(); st != procStopped || exit != 1 || exits != 1 {
		t.Fatalf("after two exits: %s, status %d, %d handler calls", st, exit, exits)
	}
	ran := false
	err := p.run(t.Context(), nil, guestProcess{PID: 1, Close: func() { ran = true }})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !ran {
		t.Fatalf("run of a stopped process: %v (closed %v)", err, ran)
	}
}

package shim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	"github.com/sandlot-dev/sandlot/guest/control"
)

const testExec = "e1"

// exec adds an exec of args to the app container.
func (h *harness) exec(execID string, proc specs.Process, std stdio) error {
	_, err := h.s.Exec(h.ctx, &taskAPI.ExecProcessRequest{ID: testApp, ExecID: execID,
		Stdin: std.Stdin, Stdout: std.Stdout, Stderr: std.Stderr, Terminal: std.Terminal,
		Spec: &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process", Value: []byte(mustJSON(h.t, proc))}})
	return err
}

// startedExec adds and starts an exec of "sh"; it returns its guest PID.
func (h *harness) startedExec(execID string) int {
	h.t.Helper()
	if err := h.exec(execID, specs.Process{Args: []string{"sh"}}, stdio{}); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp, ExecID: execID}); err != nil {
		h.t.Fatal(err)
	}
	return h.guestPID(testApp, execID)
}

// killCase is a Kill of the app's process or an exec, in some state.
type killCase struct {
	name     string
	exec     bool // kill an exec, not the app
	noStart  bool // kill the app before its Start
	pause    bool // with the VM paused
	killed   bool // kill it twice
	guestErr error
	sig      uint32
	code     codes.Code
	exit     uint32 // the exit status it gets; 0: it runs on
	signaled bool   // the guest saw the signal
	vmStops  bool
}

// TestKill: a signal reaches the guest process, whose exit is the kill's
// result; a process the guest does not run yet (or a paused VM's app),
// and the app on SIGKILL, exit at once; an exited one is not found.
func TestKill(t *testing.T) {
	for _, tc := range []killCase{
		{name: "created app", noStart: true, sig: 9, exit: 137, vmStops: true},
		{name: "running app", sig: 15, exit: 143, signaled: true, vmStops: true},
		{name: "running exec", exec: true, sig: 9, exit: 137, signaled: true},
		{name: "app of a paused VM", pause: true, sig: 15, exit: 143, vmStops: true},
		{name: "exec of a paused VM", exec: true, pause: true, sig: 9, code: codes.FailedPrecondition},
		{name: "gone in the guest", guestErr: &control.Error{Code: control.CodeNotFound}, sig: 15, signaled: true},
		{name: "running app, SIGKILL: the host stops the VM", sig: 9, exit: 137, vmStops: true},
		{name: "exited app", killed: true, sig: 9, exit: 137, vmStops: true, code: codes.NotFound},
		{name: "exited exec", exec: true, killed: true, sig: 9, exit: 137, signaled: true, code: codes.NotFound},
	} {
		t.Run(tc.name, tc.run)
	}
}

func (tc killCase) run(t *testing.T) {
	h := newHarness(t)
	m := h.pod()
	if !tc.noStart {
		h.start(testPod, "")
		h.start(testApp, "")
	}
	execID := ""
	if tc.exec {
		execID = testExec
		h.startedExec(execID)
	}
	if tc.pause {
		if _, err := h.s.Pause(h.ctx, &taskAPI.PauseRequest{ID: testApp}); err != nil {
			t.Fatal(err)
		}
	}
	m.guest.signalErr = tc.guestErr
	kill := &taskAPI.KillRequest{ID: testApp, ExecID: execID, Signal: tc.sig}
	if tc.killed {
		if _, err := h.s.Kill(h.ctx, kill); err != nil {
			t.Fatal(err)
		}
		h.wait(testApp, execID)
	}
	_, err := h.s.Kill(h.ctx, kill)
	wantCode(t, "kill", err, tc.code)
	if _, sigs := m.guest.snapshot(); (len(sigs) > 0) != tc.signaled {
		t.Fatalf("guest signals %v, want signaled %v", sigs, tc.signaled)
	}
	if tc.exit == 0 {
		if st := h.state(testApp, execID); st.Status == task.Status_STOPPED {
			t.Fatal("it stopped")
		}
		return
	}
	if w := h.wait(testApp, execID); w.ExitStatus != tc.exit {
		t.Fatalf("exit %d, want %d", w.ExitStatus, tc.exit)
	}
	if tc.vmStops {
		eventually(t, "the VM to stop", m.stopped)
	} else if m.stopped() {
		t.Fatal("the VM stopped")
	}
}

// deleteCase is a Delete of the app container or an exec.
type deleteCase struct {
	name    string
	exec    bool
	start   bool
	exit    bool // the process exits before the Delete
	code    codes.Code
	status  uint32 // its exit status after; 0: it never exits
	deleted bool   // TaskDelete is published (containers only)
}

// TestDelete: an exec goes once it is not running; the app container's
// Delete stops its VM even while it runs (CRI kills first; a forced
// delete need not) and gives the pod's network back.
func TestDelete(t *testing.T) {
	for _, tc := range []deleteCase{
		{name: "running exec", exec: true, start: true, code: codes.FailedPrecondition},
		{name: "exited exec", exec: true, start: true, exit: true, status: 3},
		{name: "created exec", exec: true},
		{name: "running app", start: true, status: exitVMGone, deleted: true},
		{name: "exited app", start: true, exit: true, status: 3, deleted: true},
		{name: "created app", status: exitVMGone, deleted: true},
	} {
		t.Run(tc.name, tc.run)
	}
}

func (tc deleteCase) run(t *testing.T) {
	h := newHarness(t)
	m := h.pod()
	if tc.exec || tc.start {
		h.start(testPod, "")
		h.start(testApp, "")
	}
	execID := ""
	if tc.exec {
		execID = testExec
		if err := h.exec(execID, specs.Process{Args: []string{"sh"}}, stdio{}); err != nil {
			t.Fatal(err)
		}
		if tc.start {
			h.start(testApp, execID)
		}
	}
	_, p, _ := h.s.process(testApp, execID)
	if tc.exit {
		m.guest.exit(h.guestPID(testApp, execID), 3)
		h.wait(testApp, execID)
	}
	h.drain()
	_, err := h.s.Delete(h.ctx, &taskAPI.DeleteRequest{ID: testApp, ExecID: execID})
	wantCode(t, "delete", err, tc.code)
	if err != nil {
		h.state(testApp, execID) // still there
		return
	}
	_, err = h.s.State(h.ctx, &taskAPI.StateRequest{ID: testApp, ExecID: execID})
	wantCode(t, "state after delete", err, codes.NotFound)
	if tc.status != 0 {
		ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
		defer cancel()
		if err := p.wait(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, got, _ := p.snapshot(); got != tc.status {
			t.Fatalf("exit status %d, want %d", got, tc.status)
		}
	}
	h.wantDeleteEvent(tc.deleted)
	if attached, _, _ := h.net.state(); !tc.exec && (attached || !m.stopped()) {
		t.Fatal("the app's Delete left its VM or tap")
	}
}

func (h *harness) wantDeleteEvent(want bool) {
	h.t.Helper()
	var saw bool
	for _, e := range h.drain() {
		_, ok := e.(*eventstypes.TaskDelete)
		saw = saw || ok
	}
	if saw != want {
		h.t.Fatalf("TaskDelete published %v, want %v", saw, want)
	}
}

// TestInvalidTransitions: calls that do not fit the process's state are
// refused with a failed precondition, and do nothing.
func TestInvalidTransitions(t *testing.T) {
	start := func(h *harness, id, execID string) error {
		_, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: id, ExecID: execID})
		return err
	}
	for _, tc := range []struct {
		name    string
		do      func(h *harness) error
		code    codes.Code
		started int  // the processes the guest started in all
		podDown bool // the pause container was stopped on purpose
	}{
		{name: "start the pause container twice", do: func(h *harness) error { return start(h, testPod, "") },
			code: codes.FailedPrecondition, started: 1},
		{name: "start the app twice", do: func(h *harness) error { return start(h, testApp, "") }, code: codes.FailedPrecondition,
			started: 1},
		{name: "start an exec twice", do: func(h *harness) error {
			h.startedExec(testExec)
			return start(h, testApp, testExec)
		}, code: codes.FailedPrecondition, started: 2},
		{name: "start an exited exec", do: func(h *harness) error {
			h.vms.last().guest.exit(h.startedExec(testExec), 0)
			h.wait(testApp, testExec)
			return start(h, testApp, testExec)
		}, code: codes.FailedPrecondition, started: 2},
		{name: "start the exited pause container", do: func(h *harness) error {
			if _, err := h.s.Kill(h.ctx, &taskAPI.KillRequest{ID: testPod, Signal: 9}); err != nil {
				return err
			}
			return start(h, testPod, "")
		}, code: codes.FailedPrecondition, started: 1, podDown: true},
		{name: "start an exec of a stopped VM", do: func(h *harness) error {
			h.vms.last().guest.exit(h.guestPID(testApp, ""), 0)
			h.wait(testApp, "")
			if err := h.exec(testExec, specs.Process{Args: []string{"sh"}}, stdio{}); err != nil {
				return err
			}
			return start(h, testApp, testExec)
		}, code: codes.FailedPrecondition, started: 1},
		{name: "a second app container", do: func(h *harness) error {
			_, err := h.create("app2", appSpec())
			return err
		}, code: codes.Unknown, started: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			m, _ := h.startedPod()
			wantCode(t, tc.name, tc.do(h), tc.code)
			if started, _ := m.guest.snapshot(); len(started) != tc.started {
				t.Fatalf("the guest started %d processes, want %d", len(started), tc.started)
			}
			if st := h.state(testPod, ""); !tc.podDown && st.Status != task.Status_RUNNING {
				t.Fatalf("pause container %v", st.Status)
			}
		})
	}
}

// TestStartRetry: a Start the guest refuses leaves the process created,
// and a later Start runs it.
func TestStartRetry(t *testing.T) {
	h := newHarness(t)
	m := h.pod()
	m.guest.startErr = errors.New("exec format error")
	_, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp})
	wantCode(t, "start", err, codes.Unknown)
	if st := h.state(testApp, ""); st.Status != task.Status_CREATED {
		t.Fatalf("state %v after a failed start", st.Status)
	}
	m.guest.startErr = nil
	if _, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp}); err != nil {
		t.Fatal(err)
	}
	if st := h.state(testApp, ""); st.Status != task.Status_RUNNING {
		t.Fatalf("state %v", st.Status)
	}
}

// TestRestoreInPlace: a rollback replaces the VM under a running app
// container: the init follows the snapshot's process without an exit,
// execs end, and the new VM's exit is the container's.
func TestRestoreInPlace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		adopt  int // the init's guest PID after; 0: it exits
	}{
		{name: "app follows the snapshot's", labels: map[string]string{labelImageDigest: testDigest, labelInitPID: "77"}, adopt: 77},
		{name: "snapshot without app", labels: map[string]string{labelImageDigest: testDigest}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			old, _ := h.startedPod()
			h.startedExec(testExec)
			c, _ := h.s.get(testApp)
			dir := h.snapshotDir(tc.labels)
			api := &controlAPI{s: h.s, pod: c.pod}
			if _, err := api.Restore(context.Background(), &controlapi.RestoreRequest{Dir: dir}); err != nil {
				t.Fatal(err)
			}
			m := h.vms.last()
			if !old.stopped() || m == old || m.restoredFrom != dir || m.announced != 1 {
				t.Fatalf("old VM stopped %v; new VM restored from %q, announced %d", old.stopped(), m.restoredFrom, m.announced)
			}
			if w := h.wait(testApp, testExec); w.ExitStatus != exitVMGone {
				t.Fatalf("exec exit %d", w.ExitStatus)
			}
			if _, err := os.Stat(filepath.Join(c.bundle, cleanupFile)); err != nil {
				t.Fatalf("cleanup record: %v", err)
			}
			if tc.adopt == 0 {
				if w := h.wait(testApp, ""); w.ExitStatus != exitVMGone {
					t.Fatalf("init exit %d", w.ExitStatus)
				}
				return
			}
			if st := h.state(testApp, ""); st.Status != task.Status_RUNNING || h.guestPID(testApp, "") != tc.adopt {
				t.Fatalf("init %v pid %d after the rollback", st.Status, h.guestPID(testApp, ""))
			}
			m.guest.exit(tc.adopt, 5)
			if w := h.wait(testApp, ""); w.ExitStatus != 5 {
				t.Fatalf("init exit %d", w.ExitStatus)
			}
			eventually(t, "the VM to stop", m.stopped)
		})
	}
}

// TestRestoreInPlaceAsSandbox: a claimed warm pool pod restored from the
// claiming sandbox's data takes that sandbox's identity with the pod's
// network in the restore itself, and the same request again (an agent
// that died before it recorded the claim done) restores nothing.
func TestRestoreInPlaceAsSandbox(t *testing.T) {
	h := newHarness(t)
	old, _ := h.startedPod()
	c, _ := h.s.get(testApp)
	dir := h.snapshotDir(map[string]string{labelImageDigest: testDigest, labelInitPID: "77"})
	api := &controlAPI{s: h.s, pod: c.pod}
	req := &controlapi.RestoreRequest{Dir: dir, RequestId: "claim-1", Identity: &controlapi.SetIdentityRequest{
		SandboxId: "abcdefghij0123456789", AccessToken: "tok", Env: map[string]string{"A": "1"}, Hostname: "abcdefghij0123456789"}}
	if _, err := api.Restore(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	m := h.vms.last()
	id := m.identity
	if m == old || id.SandboxID != "abcdefghij0123456789" || id.AccessToken != "tok" || id.Env["A"] != "1" ||
		id.Hostname != "abcdefghij0123456789" || id.Network == nil || id.Network.MAC != old.identity.Network.MAC {
		t.Fatalf("restored VM's identity %+v (network %+v), want the sandbox's with the pod's network", id, id.Network)
	}
	if _, err := api.Restore(context.Background(), req); err != nil || h.vms.last() != m || m.stopped() {
		t.Fatalf("the same request again: err %v, a new VM %v, stopped %v", err, h.vms.last() != m, m.stopped())
	}
	req.RequestId = "claim-2"
	if _, err := api.Restore(context.Background(), req); err != nil || h.vms.last() == m {
		t.Fatalf("a new request: err %v, restored again %v", err, h.vms.last() != m)
	}
}

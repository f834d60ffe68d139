package pid1

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// The test process becomes a subreaper so orphans come to it, as they
// come to PID 1 in the VM.
func subreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
}

func spawn(args ...string) func() (int, error) {
	return func() (int, error) {
		p, err := os.StartProcess("/bin/sh", append([]string{"sh", "-c"}, args...),
			&os.ProcAttr{Files: []*os.File{nil, os.Stdout, os.Stderr}})
		if err != nil {
			return 0, err
		}
		pid := p.Pid
		_ = p.Release() // the reaper waits, not os.Process
		return pid, nil
	}
}

func recv(t *testing.T, ch <-chan unix.WaitStatus) unix.WaitStatus {
	t.Helper()
	select {
	case ws := <-ch:
		return ws
	case <-time.After(10 * time.Second):
		t.Fatal("no exit status within 10s")
		return 0
	}
}

func runReaper(t *testing.T) *Reaper {
	t.Helper()
	subreaper(t)
	r := NewReaper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func TestReaperDeliversStatusToStarter(t *testing.T) {
	r := runReaper(t)
	pid, ch, err := r.Start(spawn("exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	ws := recv(t, ch)
	if !ws.Exited() || ws.ExitStatus() != 3 {
		t.Fatalf("pid %d: status %#x, want exit 3", pid, ws)
	}
}

func TestReaperSignaledChild(t *testing.T) {
	r := runReaper(t)
	pid, ch, err := r.Start(spawn("exec sleep 30"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ws := recv(t, ch)
	if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Fatalf("status %#x, want killed by SIGKILL", ws)
	}
}

// Children that exit at once, started concurrently while the reaper
// runs: every status reaches its starter (none is stolen as an orphan).
func TestReaperNoStolenStatuses(t *testing.T) {
	r := runReaper(t)
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			code := i % 7
			_, ch, err := r.Start(spawn("exit " + string(rune('0'+code))))
			if err != nil {
				errs <- err.Error()
				return
			}
			select {
			case ws := <-ch:
				if ws.ExitStatus() != code {
					errs <- "wrong status"
				}
			case <-time.After(10 * time.Second):
				errs <- "no status"
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if o := r.Orphans(); o != 0 {
		t.Errorf("%d statuses went unclaimed", o)
	}
}

// Grandchildren orphaned by their parent are re-parented to the
// subreaper and reaped without anybody asking.
func TestReaperReapsOrphans(t *testing.T) {
	r := runReaper(t)
	_, ch, err := r.Start(spawn("sleep 0.2 & sleep 0.2 & exit 0"))
	if err != nil {
		t.Fatal(err)
	}
	if ws := recv(t, ch); ws.ExitStatus() != 0 {
		t.Fatalf("status %#x", ws)
	}
	poll.Eventually(t, 10*time.Second, "two orphans reaped", func() error {
		if n := r.Orphans(); n < 2 {
			return fmt.Errorf("%d reaped", n)
		}
		return nil
	})
}

// A pid registered after the reaper collected it still gets its status.
func TestReaperRegisterAfterExit(t *testing.T) {
	subreaper(t)
	r := NewReaper()
	pid, err := spawn("exit 5")()
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, "the child reaped", func() error {
		if r.Reap() == 0 {
			return errors.New("Reap found no exited child")
		}
		return nil
	})
	ws := recv(t, r.Register(pid))
	if ws.ExitStatus() != 5 {
		t.Fatalf("status %#x, want exit 5", ws)
	}
	// Delivered once only.
	select {
	case ws := <-r.Register(pid):
		t.Fatalf("second registration got %#x", ws)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestStatFlagsAndProcesses(t *testing.T) {
	flags, ok := statFlags("123 (a) b) c) S 1 123 123 0 -1 4194560 10 0 0 0")
	if !ok || flags != 4194560 {
		t.Fatalf("flags %d %v", flags, ok)
	}
	if _, ok := statFlags("garbage"); ok {
		t.Fatal("parsed garbage")
	}
	// A live child is listed, this process is not.
	subreaper(t)
	r := NewReaper()
	pid, ch, err := r.Start(spawn("exec sleep 30"))
	if err != nil {
		t.Fatal(err)
	}
	pids, err := userProcesses("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, p := range pids {
		if p == os.Getpid() {
			t.Error("self listed")
		}
		found = found || p == pid
	}
	if !found {
		t.Errorf("child %d not in %v", pid, pids)
	}
	_ = unix.Kill(pid, unix.SIGKILL)
	for {
		r.Reap()
		select {
		case <-ch:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

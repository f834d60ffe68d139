package pid1

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeSystem records Init's side effects instead of making them.
type fakeSystem struct {
	mu       sync.Mutex
	calls    []string
	mountErr map[string]error // by target
	// stubborn processes survive SIGTERM (not SIGKILL).
	stubborn bool
	killed   bool
	// children are real processes: Kill(-1) signals them, Processes
	// lists those still existing (zombies included, as /proc would).
	children []int
}

func (f *fakeSystem) rec(format string, args ...any) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fakeSystem) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeSystem) Mkdir(dir string, mode os.FileMode) error {
	f.rec("%s", Step{Kind: StepMkdir, Target: dir, Mode: mode})
	return nil
}

func (f *fakeSystem) Mount(src, dst, fstype string, flags uintptr, data string) error {
	switch {
	case flags&unix.MS_MOVE != 0:
		f.rec("%s", Step{Kind: StepMove, Source: src, Target: dst})
	case flags&unix.MS_REMOUNT != 0:
		f.rec("remount %s %s", dst, flagString(flags&^unix.MS_REMOUNT))
	default:
		f.rec("%s", Step{Kind: StepMount, Source: src, Target: dst, FSType: fstype, Flags: flags, Data: data})
	}
	return f.mountErr[dst]
}

func (f *fakeSystem) IsMountPoint(dir string) bool { return dir == "/dev" } // the kernel mounted it
func (f *fakeSystem) Console(dev string) error     { f.rec("console %s", dev); return nil }
func (f *fakeSystem) LoadModule(p string) error    { f.rec("load-module %s", p); return nil }
func (f *fakeSystem) WaitDevice(p string, _ time.Duration) error {
	f.rec("wait-device %s", p)
	return nil
}
func (f *fakeSystem) SwitchRoot(r string) error { f.rec("switch-root %s", r); return nil }
func (f *fakeSystem) LinkUp(name string) error  { f.rec("link-up %s", name); return nil }
func (f *fakeSystem) Kill(pid int, sig unix.Signal) error {
	f.rec("kill %d %s", pid, unix.SignalName(sig))
	f.mu.Lock()
	defer f.mu.Unlock()
	if sig == unix.SIGKILL {
		f.killed = true
	}
	for _, c := range f.children {
		_ = unix.Kill(c, sig)
	}
	return nil
}
func (f *fakeSystem) Processes() ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stubborn && !f.killed {
		return []int{42}, nil
	}
	var alive []int
	for _, c := range f.children {
		if unix.Kill(c, 0) == nil {
			alive = append(alive, c)
		}
	}
	return alive, nil
}
func (f *fakeSystem) Sync()                              { f.rec("sync") }
func (f *fakeSystem) Unmount(target string, _ int) error { f.rec("unmount %s", target); return nil }
func (f *fakeSystem) PowerOff() error                    { f.rec("poweroff"); return nil }

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn + 10}))
}

// bootCalls is what the fake records for cfg's plan (the devtmpfs mount
// is skipped: the fake says /dev is mounted already).
func bootCalls(t *testing.T, cfg Config) []string {
	plan, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range plan {
		if s.IfNotMounted && s.Target == "/dev" {
			continue
		}
		s.IfNotMounted = false // the fake records the mount itself
		out = append(out, s.String())
	}
	return out
}

// Longer than 60 lines: one boot, checked step by step.
func TestRunBootsServesAndShutsDown(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stubborn bool
		trigger  string // shutdown, signal, main
		kills    []string
	}{
		{name: "Shutdown call", trigger: "shutdown", kills: []string{"kill -1 SIGTERM"}},
		{name: "SIGTERM", trigger: "signal", kills: []string{"kill -1 SIGTERM"}},
		{name: "Main returns", trigger: "main", kills: []string{"kill -1 SIGTERM"}},
		{name: "stubborn processes", trigger: "shutdown", stubborn: true,
			kills: []string{"kill -1 SIGTERM", "kill -1 SIGKILL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeSystem{stubborn: tc.stubborn}
			started := make(chan *Init, 1)
			mainCtxDone := make(chan struct{})
			cfg := Config{
				Modules:         []string{"/m/virtio_blk.ko"},
				BaseDevice:      "/dev/vda",
				WritableDevice:  "/dev/vdb",
				ShutdownTimeout: 300 * time.Millisecond,
				Logger:          quietLogger(),
				sys:             fake,
				allowNotPID1:    true,
				Main: func(ctx context.Context, in *Init) error {
					if in.Reaper() == nil {
						t.Error("no reaper")
					}
					started <- in
					if tc.trigger == "main" {
						return nil
					}
					<-ctx.Done()
					close(mainCtxDone)
					return nil
				},
			}
			errc := make(chan error, 1)
			go func() { errc <- Run(cfg) }()
			in := <-started
			switch tc.trigger {
			case "shutdown":
				in.Shutdown()
				in.Shutdown() // twice is fine
			case "signal":
				if err := unix.Kill(os.Getpid(), unix.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-errc:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
			if tc.trigger != "main" {
				select {
				case <-mainCtxDone:
				default:
					t.Error("Main's context was not canceled")
				}
			}
			want := concat(bootCalls(t, cfg), []string{"link-up lo"}, tc.kills, []string{
				"sync",
				"remount / ro",
				"unmount /tmp",
				"unmount /run/sandlot/rw",
				"unmount /run/sandlot/base",
				"sync",
				"poweroff",
			})
			if got := fake.Calls(); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestRunBootFailurePowersOff(t *testing.T) {
	fake := &fakeSystem{mountErr: map[string]error{WritableMount: unix.EINVAL}}
	cfg := Config{
		BaseDevice: "/dev/vda", WritableDevice: "/dev/vdb",
		Logger: quietLogger(), sys: fake, allowNotPID1: true,
		Main: func(context.Context, *Init) error { t.Error("Main ran after a failed boot"); return nil },
	}
	err := Run(cfg)
	if err == nil || !strings.Contains(err.Error(), "formatted ext4 by the host") ||
		!strings.Contains(err.Error(), "/dev/vdb") {
		t.Fatalf("err = %v", err)
	}
	calls := fake.Calls()
	if tail := strings.Join(calls[len(calls)-2:], ","); tail != "sync,poweroff" {
		t.Fatalf("calls end with %s", tail)
	}
}

func TestRunRefusesOutsidePID1(t *testing.T) {
	if err := Run(Config{Logger: quietLogger()}); err == nil || !strings.Contains(err.Error(), "PID 1") {
		t.Fatalf("err = %v", err)
	}
}

// Shutdown SIGTERMs the processes and the reaper, still running, reaps
// them: no SIGKILL is needed and shutdown does not wait for the timeout.
func TestShutdownTerminatesAndReapsChildren(t *testing.T) {
	fake := &fakeSystem{}
	var status <-chan unix.WaitStatus
	cfg := Config{
		ShutdownTimeout: 5 * time.Second,
		Logger:          quietLogger(), sys: fake, allowNotPID1: true,
		Main: func(ctx context.Context, in *Init) error {
			pid, ch, err := in.Reaper().Start(func() (int, error) {
				p, err := os.StartProcess("/bin/sleep", []string{"sleep", "30"}, &os.ProcAttr{})
				if err != nil {
					return 0, err
				}
				defer p.Release()
				return p.Pid, nil
			})
			if err != nil {
				return err
			}
			status = ch
			fake.mu.Lock()
			fake.children = append(fake.children, pid)
			fake.mu.Unlock()
			in.Shutdown()
			<-ctx.Done()
			return nil
		},
	}
	t0 := time.Now()
	if err := Run(cfg); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("shutdown took %s", d)
	}
	if status == nil {
		t.Fatal("Main did not start the child")
	}
	select {
	case ws := <-status:
		if !ws.Signaled() || ws.Signal() != unix.SIGTERM {
			t.Errorf("child status %#x, want SIGTERM", ws)
		}
	default:
		t.Error("child not reaped")
	}
	for _, c := range fake.Calls() {
		if strings.Contains(c, "SIGKILL") {
			t.Errorf("needed %q", c)
		}
	}
}

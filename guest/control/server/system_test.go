package server

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/pid1"
)

// A char device path is served as a port (here a pty slave in raw mode
// stands in for the virtio-serial port; the test talks on the master).
func TestServeCharDevice(t *testing.T) {
	m, s, err := openPTY(80, 24)
	if err != nil {
		t.Fatalf("open a pty (/dev/ptmx): %v", err)
	}
	defer s.Close()
	rc, _ := s.SyscallConn()
	_ = rc.Control(func(fd uintptr) {
		tio, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		tio.Oflag &^= unix.OPOST
		tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		tio.Cflag = tio.Cflag&^(unix.CSIZE|unix.PARENB) | unix.CS8
		tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
		if err := unix.IoctlSetTermios(int(fd), unix.TCSETS, tio); err != nil {
			t.Fatal(err)
		}
	})
	h := newHandler(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, s.Name(), h) }()
	c := control.NewClient(m)
	defer func() {
		cancel()
		<-done
		c.Close()
	}()
	r, err := c.WaitReady(testCtx(t), 200*time.Millisecond)
	if err != nil || r.BootID == "" {
		t.Fatalf("ping over the device: %+v %v", r, err)
	}
	p, err := c.Start(testCtx(t), control.StartParams{Args: []string{"sh", "-c", "echo via-port; exit 2"}})
	if err != nil {
		t.Fatal(err)
	}
	if stdout, _, _, exit := collectSub(t, p.Events()); stdout != "via-port\n" || exit.Status != 2 {
		t.Errorf("stdout %q exit %+v", stdout, exit)
	}
}

// With pid1's central reaper (as in the VM), processes still report
// their exit statuses.
func TestProcessesWithCentralReaper(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	r := pid1.NewReaper()
	ctx, cancel := context.WithCancel(context.Background())
	reaped := make(chan struct{})
	go func() { _ = r.Run(ctx); close(reaped) }()
	defer func() { cancel(); <-reaped }()

	h := newHandler(t, Options{Reaper: r})
	c := pipeClient(t, h)
	p, err := c.Start(testCtx(t), control.StartParams{Args: []string{"sh", "-c", "echo hi; sleep 0.1 & exit 4"}})
	if err != nil {
		t.Fatal(err)
	}
	if stdout, _, _, exit := collectSub(t, p.Events()); stdout != "hi\n" || exit.Status != 4 {
		t.Errorf("stdout %q exit %+v", stdout, exit)
	}
	q, err := c.Start(testCtx(t), control.StartParams{Args: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Signal(testCtx(t), q.PID, 9); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Wait(testCtx(t)); err != nil || st.Signal != 9 {
		t.Errorf("wait: %+v %v", st, err)
	}
}

// Without CAP_SYS_ADMIN the reseed says so (and still mixes the seed in
// by a write). Capabilities are per thread: drop it on a locked thread.
func TestReseedWithoutCapability(t *testing.T) {
	type out struct {
		entropy, reseeded bool
		err               error
		setupErr          string // dropping the capability failed
	}
	done := make(chan out, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- out{setupErr: "capget: " + err.Error()}
			return
		}
		data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- out{setupErr: "capset: " + err.Error()}
			return
		}
		e, r, err := reseedKernel([]byte("seed"), identity.Identity{})
		done <- out{entropy: e, reseeded: r, err: err}
	}()
	o := <-done
	if o.setupErr != "" {
		t.Fatalf("drop CAP_SYS_ADMIN on a thread: %s", o.setupErr)
	}
	if o.entropy || o.reseeded || o.err == nil {
		t.Fatalf("entropy %v reseeded %v err %v: want both false with an error", o.entropy, o.reseeded, o.err)
	}
	for _, want := range []string{"RNDADDENTROPY", "RNDRESEEDCRNG", "CAP_SYS_ADMIN", "mixed in by a write"} {
		if !strings.Contains(o.err.Error(), want) {
			t.Errorf("error %q lacks %q", o.err, want)
		}
	}
}

package control

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	c := NewClient(m)
	defer func() {
		cancel()
		<-done
		c.Close()
	}()
	r, err := c.WaitReady(testCtx(t), 200*time.Millisecond)
	if err != nil || r.BootID == "" {
		t.Fatalf("ping over the device: %+v %v", r, err)
	}
	p, err := c.Start(testCtx(t), StartParams{Args: []string{"sh", "-c", "echo via-port; exit 2"}})
	if err != nil {
		t.Fatal(err)
	}
	if stdout, _, _, exit := collectSub(t, p.Events()); stdout != "via-port\n" || exit.Status != 2 {
		t.Errorf("stdout %q exit %+v", stdout, exit)
	}
}

// With ApplyHost, setIdentity sets the hostname and moves the NIC to the
// new address, MAC and route — here in private network and UTS
// and mount namespaces, so the host is untouched (the clock is not stepped:
// UnixNano is 0).
func TestSetIdentityAppliesInNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("run as root: the test makes network and UTS namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("ip not found: install iproute2 (the test sets up and inspects the namespace with it)")
	}
	hostName, _ := os.Hostname()
	etcHostname := filepath.Join(t.TempDir(), "hostname")
	if err := os.WriteFile(etcHostname, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHandler(t, Options{ApplyHost: true, hostnameFile: etcHostname})

	errs := make(chan string, 32)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWNS); err != nil {
			errs <- "unshare: " + err.Error()
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errs <- "private mounts: " + err.Error()
			return
		}
		sh := func(cmd string) string {
			out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
			if err != nil {
				errs <- cmd + ": " + err.Error() + ": " + string(out)
			}
			return string(out)
		}
		sh("ip link add v0 type veth peer name v1 && ip link set v1 up")

		res := h.SetIdentity(SetIdentityParams{Identity: identity.Identity{
			SandboxID: "nsnsnsnsnsnsnsnsnsns",
			Hostname:  "sbx-one",
			Network:   &identity.Network{Interface: "v0", Address: "10.99.0.5/24", Gateway: "10.99.0.1", MAC: "02:00:00:00:00:05"},
		}})
		if !res.Hostname || !res.Network || res.Clock || len(res.Errors) > 0 && !strings.Contains(strings.Join(res.Errors, ""), "rng") {
			errs <- "first identity: " + strings.Join(res.Errors, "; ")
		}
		var uts unix.Utsname
		_ = unix.Uname(&uts)
		if got := unix.ByteSliceToString(uts.Nodename[:]); got != "sbx-one" {
			errs <- "hostname " + got
		}
		expect := func(cmd string, want ...string) {
			out := sh(cmd)
			for _, w := range want {
				if !strings.Contains(out, w) {
					errs <- cmd + ": want " + w + " in:\n" + out
				}
			}
		}
		expect("cat "+etcHostname, "sbx-one\n") // bound to the kernel's hostname
		expect("ip -4 addr show dev v0", "inet 10.99.0.5/24")
		expect("ip link show dev v0", "02:00:00:00:00:05", ",UP")
		expect("ip route show default", "default via 10.99.0.1 dev v0")
		// No link-local: the kernel was told to generate none before the
		// first up (a snapshot would carry it into every clone).
		if out := sh("ip -6 addr show dev v0"); strings.Contains(out, "fe80") {
			errs <- "a link-local on an IPv4 NIC:\n" + out
		}

		// A clone's second identity: the old address and neighbours go.
		sh("ip neigh replace 10.99.0.7 lladdr 02:00:00:00:00:07 dev v0 nud stale")
		expect("ip neigh show dev v0", "10.99.0.7")
		res = h.SetIdentity(SetIdentityParams{Identity: identity.Identity{
			Network: &identity.Network{Interface: "v0", Address: "10.99.1.6/24", Gateway: "10.99.1.1", MAC: "02:00:00:00:00:06"},
		}})
		if !res.Network {
			errs <- "second identity: " + strings.Join(res.Errors, "; ")
		}
		expect("ip -4 addr show dev v0", "inet 10.99.1.6/24")
		if out := sh("ip -4 addr show dev v0"); strings.Contains(out, "10.99.0.5") {
			errs <- "old address kept:\n" + out
		}
		if out := sh("ip neigh show dev v0"); strings.Contains(out, "10.99.0.7") {
			errs <- "neighbour kept:\n" + out
		}
		expect("ip link show dev v0", "02:00:00:00:00:06", ",UP")
		expect("ip route show default", "default via 10.99.1.1 dev v0")
		// A snapshot that drops the network: no address nor route until
		// restoreNetwork; or a clone's identity, which only adds its own.
		drop := func() {
			r, err := h.prepareSnapshot(context.Background(), json.RawMessage(`{"dropNetwork":true}`))
			if err != nil || !r.(PrepareSnapshotResult).NetworkDropped {
				errs <- fmt.Sprintf("prepareSnapshot: %+v %v", r, err)
			}
			if out := sh("ip -4 addr show dev v0; ip route show default"); strings.Contains(out, "10.99.") || strings.Contains(out, "default") {
				errs <- "network kept after dropNetwork:\n" + out
			}
		}
		drop()
		if r, err := h.restoreNetwork(context.Background(), nil); err != nil || !r.(RestoreNetworkResult).Network {
			errs <- fmt.Sprintf("restoreNetwork: %+v %v", r, err)
		}
		expect("ip -4 addr show dev v0", "inet 10.99.1.6/24")
		expect("ip route show default", "default via 10.99.1.1 dev v0")
		drop()
		res = h.SetIdentity(SetIdentityParams{Identity: identity.Identity{
			Network: &identity.Network{Interface: "v0", Address: "10.99.2.8/24", Gateway: "10.99.2.1", MAC: "02:00:00:00:00:08"},
		}})
		if !res.Network {
			errs <- "identity after dropNetwork: " + strings.Join(res.Errors, "; ")
		}
		expect("ip -4 addr show dev v0", "inet 10.99.2.8/24")
		expect("ip route show default", "default via 10.99.2.1 dev v0")
		if out := sh("ip -4 addr show dev v0"); strings.Contains(out, "10.99.1.6") {
			errs <- "the dropped address came back:\n" + out
		}

		// An IPv6 identity, the MAC changed with the link up: the NIC gets
		// the link-local of its new MAC.
		res = h.SetIdentity(SetIdentityParams{Identity: identity.Identity{
			Network: &identity.Network{Interface: "v0", Address: "fd00:99::7/64", Gateway: "fd00:99::1", MAC: "02:00:00:00:00:07"},
		}})
		if !res.Network {
			errs <- "IPv6 identity: " + strings.Join(res.Errors, "; ")
		}
		expect("ip link show dev v0", "02:00:00:00:00:07", ",UP")
		expect("ip -6 addr show dev v0", "fd00:99::7/64", "fe80::ff:fe00:7/64")
		expect("ip -6 route show default", "default via fd00:99::1 dev v0")

		res = h.SetIdentity(SetIdentityParams{Identity: identity.Identity{
			Network: &identity.Network{Interface: "nope0", Address: "10.99.1.6/24"},
		}})
		if res.Network || res.Err() == nil || !strings.Contains(res.Err().Error(), "nope0") {
			errs <- "missing interface not reported"
		}

		// A NIC that was up before its first identity has the kernel's
		// link-local: the MAC then changes around a link down/up, which
		// gives it the new MAC's.
		sh("ip link add w0 type veth peer name w1 && ip link set w1 up && ip link set w0 address 02:00:00:00:00:0a up")
		expect("ip -6 addr show dev w0", "fe80::ff:fe00:a/64")
		res = h.SetIdentity(SetIdentityParams{Identity: identity.Identity{
			Network: &identity.Network{Interface: "w0", Address: "10.98.0.9/24", MAC: "02:00:00:00:00:09"},
		}})
		if !res.Network {
			errs <- "identity of a NIC up before it: " + strings.Join(res.Errors, "; ")
		}
		expect("ip link show dev w0", "02:00:00:00:00:09", ",UP")
		expect("ip -6 addr show dev w0", "fe80::ff:fe00:9/64")
		if out := sh("ip -6 addr show dev w0"); strings.Contains(out, "fe80::ff:fe00:a") {
			errs <- "the old MAC's kernel link-local kept:\n" + out
		}
	}()
	<-done
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if b, _ := os.ReadFile(etcHostname); string(b) != "old\n" {
		t.Errorf("hostname file outside the test's mount namespace %q, want it untouched", b)
	}
	if now, _ := os.Hostname(); now != hostName {
		t.Errorf("host's hostname changed: %q -> %q", hostName, now)
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
	p, err := c.Start(testCtx(t), StartParams{Args: []string{"sh", "-c", "echo hi; sleep 0.1 & exit 4"}})
	if err != nil {
		t.Fatal(err)
	}
	if stdout, _, _, exit := collectSub(t, p.Events()); stdout != "hi\n" || exit.Status != 4 {
		t.Errorf("stdout %q exit %+v", stdout, exit)
	}
	q, err := c.Start(testCtx(t), StartParams{Args: []string{"sleep", "30"}})
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
		skip              string
	}
	done := make(chan out, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- out{skip: "capget: " + err.Error()}
			return
		}
		data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- out{skip: "capset: " + err.Error()}
			return
		}
		e, r, err := reseedKernel([]byte("seed"), identity.Identity{})
		done <- out{entropy: e, reseeded: r, err: err}
	}()
	o := <-done
	if o.skip != "" {
		t.Fatalf("drop CAP_SYS_ADMIN on a thread: %s", o.skip)
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

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
)

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
	e := &nsEnv{
		h:            newHandler(t, Options{ApplyHost: true, hostnameFile: etcHostname}),
		hostnameFile: etcHostname,
		errs:         make(chan string, 32),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := enterNamespaces(); err != nil {
			e.errs <- err.Error()
			return
		}
		nsFirstIdentity(e)
		nsNextIdentity(e)
		nsDropNetwork(e)
		nsIPv6Identity(e)
		nsUpBeforeIdentity(e)
	}()
	<-done
	close(e.errs)
	for msg := range e.errs {
		t.Error(msg)
	}
	if b, _ := os.ReadFile(etcHostname); string(b) != "old\n" {
		t.Errorf("hostname file outside the test's mount namespace %q, want it untouched", b)
	}
	if now, _ := os.Hostname(); now != hostName {
		t.Errorf("host's hostname changed: %q -> %q", hostName, now)
	}
}

// enterNamespaces moves the calling (locked) thread into new network,
// UTS and mount namespaces, its mounts private to it.
func enterNamespaces() error {
	if err := unix.Unshare(unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mounts: %w", err)
	}
	return nil
}

// nsEnv is what the checks inside the namespaces share. They run on the
// namespaced thread, where t.Fatal cannot be used: failures go to errs.
type nsEnv struct {
	h            *Handler
	hostnameFile string
	errs         chan string
}

// sh runs cmd in the namespaces (the commands inherit the thread's).
func (e *nsEnv) sh(cmd string) string {
	out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
	if err != nil {
		e.errs <- cmd + ": " + err.Error() + ": " + string(out)
	}
	return string(out)
}

// expect reports cmd's output lacking any of want.
func (e *nsEnv) expect(cmd string, want ...string) {
	out := e.sh(cmd)
	for _, w := range want {
		if !strings.Contains(out, w) {
			e.errs <- cmd + ": want " + w + " in:\n" + out
		}
	}
}

// absent reports cmd's output holding any of unwanted, as msg.
func (e *nsEnv) absent(cmd, msg string, unwanted ...string) {
	out := e.sh(cmd)
	for _, u := range unwanted {
		if strings.Contains(out, u) {
			e.errs <- msg + ":\n" + out
			return
		}
	}
}

// setNetwork applies an identity with only n, reporting what failed.
func (e *nsEnv) setNetwork(n identity.Network, what string) control.SetIdentityResult {
	res := e.h.SetIdentity(control.SetIdentityParams{Identity: identity.Identity{Network: &n}})
	if !res.Network {
		e.errs <- what + ": " + strings.Join(res.Errors, "; ")
	}
	return res
}

// nsFirstIdentity: the hostname, and a NIC down until now moved to its
// first address, MAC and route.
func nsFirstIdentity(e *nsEnv) {
	e.sh("ip link add v0 type veth peer name v1 && ip link set v1 up")
	res := e.h.SetIdentity(control.SetIdentityParams{Identity: identity.Identity{
		SandboxID: "nsnsnsnsnsnsnsnsnsns",
		Hostname:  "sbx-one",
		Network:   &identity.Network{Interface: "v0", Address: "10.99.0.5/24", Gateway: "10.99.0.1", MAC: "02:00:00:00:00:05"},
	}})
	if !res.Hostname || !res.Network || res.Clock || len(res.Errors) > 0 && !strings.Contains(strings.Join(res.Errors, ""), "rng") {
		e.errs <- "first identity: " + strings.Join(res.Errors, "; ")
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	if got := unix.ByteSliceToString(uts.Nodename[:]); got != "sbx-one" {
		e.errs <- "hostname " + got
	}
	e.expect("cat "+e.hostnameFile, "sbx-one\n") // bound to the kernel's hostname
	e.expect("ip -4 addr show dev v0", "inet 10.99.0.5/24")
	e.expect("ip link show dev v0", "02:00:00:00:00:05", ",UP")
	e.expect("ip route show default", "default via 10.99.0.1 dev v0")
	// No link-local: the kernel was told to generate none before the
	// first up (a snapshot would carry it into every clone).
	e.absent("ip -6 addr show dev v0", "a link-local on an IPv4 NIC", "fe80")
}

// nsNextIdentity: a clone's second identity: the old address and
// neighbours go.
func nsNextIdentity(e *nsEnv) {
	e.sh("ip neigh replace 10.99.0.7 lladdr 02:00:00:00:00:07 dev v0 nud stale")
	e.expect("ip neigh show dev v0", "10.99.0.7")
	e.setNetwork(identity.Network{Interface: "v0", Address: "10.99.1.6/24", Gateway: "10.99.1.1", MAC: "02:00:00:00:00:06"},
		"second identity")
	e.expect("ip -4 addr show dev v0", "inet 10.99.1.6/24")
	e.absent("ip -4 addr show dev v0", "old address kept", "10.99.0.5")
	e.absent("ip neigh show dev v0", "neighbour kept", "10.99.0.7")
	e.expect("ip link show dev v0", "02:00:00:00:00:06", ",UP")
	e.expect("ip route show default", "default via 10.99.1.1 dev v0")
}

// nsDropNetwork: a snapshot that drops the network: no address nor route
// until restoreNetwork; or a clone's identity, which only adds its own.
func nsDropNetwork(e *nsEnv) {
	drop := func() {
		r, err := e.h.prepareSnapshot(context.Background(), json.RawMessage(`{"dropNetwork":true}`))
		if err != nil || !r.(control.PrepareSnapshotResult).NetworkDropped {
			e.errs <- fmt.Sprintf("prepareSnapshot: %+v %v", r, err)
		}
		e.absent("ip -4 addr show dev v0; ip route show default", "network kept after dropNetwork", "10.99.", "default")
	}
	drop()
	if r, err := e.h.restoreNetwork(context.Background(), nil); err != nil || !r.(control.RestoreNetworkResult).Network {
		e.errs <- fmt.Sprintf("restoreNetwork: %+v %v", r, err)
	}
	e.expect("ip -4 addr show dev v0", "inet 10.99.1.6/24")
	e.expect("ip route show default", "default via 10.99.1.1 dev v0")
	drop()
	e.setNetwork(identity.Network{Interface: "v0", Address: "10.99.2.8/24", Gateway: "10.99.2.1", MAC: "02:00:00:00:00:08"},
		"identity after dropNetwork")
	e.expect("ip -4 addr show dev v0", "inet 10.99.2.8/24")
	e.expect("ip route show default", "default via 10.99.2.1 dev v0")
	e.absent("ip -4 addr show dev v0", "the dropped address came back", "10.99.1.6")
}

// nsIPv6Identity: an IPv6 identity, the MAC changed with the link up: the
// NIC gets the link-local of its new MAC. Then a NIC that does not exist.
func nsIPv6Identity(e *nsEnv) {
	e.setNetwork(identity.Network{Interface: "v0", Address: "fd00:99::7/64", Gateway: "fd00:99::1", MAC: "02:00:00:00:00:07"},
		"IPv6 identity")
	e.expect("ip link show dev v0", "02:00:00:00:00:07", ",UP")
	e.expect("ip -6 addr show dev v0", "fd00:99::7/64", "fe80::ff:fe00:7/64")
	e.expect("ip -6 route show default", "default via fd00:99::1 dev v0")

	res := e.h.SetIdentity(control.SetIdentityParams{Identity: identity.Identity{
		Network: &identity.Network{Interface: "nope0", Address: "10.99.1.6/24"},
	}})
	if res.Network || res.Err() == nil || !strings.Contains(res.Err().Error(), "nope0") {
		e.errs <- "missing interface not reported"
	}
}

// nsUpBeforeIdentity: a NIC that was up before its first identity has the
// kernel's link-local: the MAC then changes around a link down/up, which
// gives it the new MAC's.
func nsUpBeforeIdentity(e *nsEnv) {
	e.sh("ip link add w0 type veth peer name w1 && ip link set w1 up && ip link set w0 address 02:00:00:00:00:0a up")
	e.expect("ip -6 addr show dev w0", "fe80::ff:fe00:a/64")
	e.setNetwork(identity.Network{Interface: "w0", Address: "10.98.0.9/24", MAC: "02:00:00:00:00:09"},
		"identity of a NIC up before it")
	e.expect("ip link show dev w0", "02:00:00:00:00:09", ",UP")
	e.expect("ip -6 addr show dev w0", "fe80::ff:fe00:9/64")
	e.absent("ip -6 addr show dev w0", "the old MAC's kernel link-local kept", "fe80::ff:fe00:a")
}

func TestEUI64LinkLocal(t *testing.T) {
	for mac, want := range map[string]string{
		"52:54:00:12:34:56": "fe80::5054:ff:fe12:3456/64",
		"02:00:00:00:00:06": "fe80::ff:fe00:6/64",
	} {
		hw, err := net.ParseMAC(mac)
		if err != nil {
			t.Fatal(err)
		}
		if got := eui64LinkLocal(hw).String(); got != want {
			t.Errorf("%s: %s, want %s", mac, got, want)
		}
	}
}

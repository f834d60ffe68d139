package podnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const podMTU = 1450 // not 1500, so a tap left at the default MTU is caught

// env is a pod network built the way the CNI bridge plugin builds it: a
// bridge with the gateway IP, and a veth whose peer is eth0 in the pod netns.
type env struct {
	nsName, ns string // netns name and its /run/netns path
	br         netlink.Link
	hostVeth   string
	gw, podIP  net.IP
	podMAC     net.HardwareAddr
	prefix     string // "10.x.y"
}

var envSeq atomic.Int32

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it creates a netns, veth, bridge and tc filters): run as root, e.g. go test -exec sudo ./shim/podnet/")
	}
	i, pid := envSeq.Add(1), os.Getpid()
	e := &env{
		nsName:   fmt.Sprintf("podnet-%d-%d", pid, i),
		hostVeth: fmt.Sprintf("pnv%d-%d", pid, i),
		prefix:   fmt.Sprintf("10.%d.%d", 200+i%50, pid%250),
	}
	e.ns = filepath.Join("/run/netns", e.nsName)
	e.gw, e.podIP = net.ParseIP(e.prefix+".1").To4(), net.ParseIP(e.prefix+".5").To4()
	e.addBridge(t, fmt.Sprintf("pnb%d-%d", pid, i))
	e.addNetns(t)
	e.addVeth(t)
	e.configurePod(t)
	return e
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (e *env) addBridge(t *testing.T, name string) {
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
	must(t, "add bridge", netlink.LinkAdd(br))
	t.Cleanup(func() { _ = netlink.LinkDel(br) })
	addr, _ := netlink.ParseAddr(e.prefix + ".1/24")
	must(t, "bridge address", netlink.AddrAdd(br, addr))
	must(t, "bridge up", netlink.LinkSetUp(br))
	e.br = br
}

// addNetns creates a named netns like `ip netns add`; netns.NewNamed moves
// the calling thread into it, so do that on a throwaway locked thread.
func (e *env) addNetns(t *testing.T) {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		ns, err := netns.NewNamed(e.nsName)
		if err == nil {
			ns.Close()
		}
		if serr := netns.Set(orig); serr != nil {
			errc <- serr // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	must(t, "create netns", <-errc)
	t.Cleanup(func() { _ = netns.DeleteNamed(e.nsName) })
}

func (e *env) addVeth(t *testing.T) {
	ns, err := netns.GetFromName(e.nsName)
	must(t, "open netns", err)
	defer ns.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: e.hostVeth, MTU: podMTU},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	must(t, "add veth", netlink.LinkAdd(veth))
	t.Cleanup(func() { _ = netlink.LinkDel(veth) })
	must(t, "enslave veth", netlink.LinkSetMaster(veth, e.br))
	must(t, "host veth up", netlink.LinkSetUp(veth))
	// Pin the bridge MAC like the bridge plugin does, so frames we craft
	// for it keep arriving.
	br, err := netlink.LinkByName(e.br.Attrs().Name)
	must(t, "find bridge", err)
	must(t, "pin bridge MAC", netlink.LinkSetHardwareAddr(br, br.Attrs().HardwareAddr))
	e.br = br
}

func (e *env) handle(t *testing.T) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromName(e.nsName)
	must(t, "open netns", err)
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	must(t, "netlink handle in netns", err)
	t.Cleanup(h.Close)
	return h
}

func (e *env) configurePod(t *testing.T) {
	h := e.handle(t)
	lo, err := h.LinkByName("lo")
	must(t, "find lo", err)
	must(t, "lo up", h.LinkSetUp(lo))
	eth0, err := h.LinkByName("eth0")
	must(t, "find eth0", err)
	must(t, "eth0 MTU", h.LinkSetMTU(eth0, podMTU))
	addr, _ := netlink.ParseAddr(e.prefix + ".5/24")
	must(t, "eth0 address", h.AddrAdd(eth0, addr))
	must(t, "eth0 up", h.LinkSetUp(eth0))
	must(t, "default route", h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: e.gw}))
	e.podMAC = eth0.Attrs().HardwareAddr
}

func (e *env) want() Pod {
	return Pod{Interface: "eth0", Address: e.prefix + ".5/24", Gateway: e.prefix + ".1", MAC: e.podMAC.String(), MTU: podMTU}
}

// mustTC fails with the kernel options to enable when nftables pieces
// are missing.
func mustTC(t *testing.T, what string, err error) {
	t.Helper()
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("%s: %v\nthe kernel lacks netdev nftables: enable NF_TABLES_NETDEV, NFT_DUP_NETDEV and NFT_REJECT_NETDEV", what, err)
	}
	must(t, what, err)
}

func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	p, err := Inspect(e.ns, "")
	must(t, "Inspect", err)
	if p != e.want() {
		t.Fatalf("Inspect = %+v, want %+v", p, e.want())
	}
	if p2, err := Inspect(e.ns, "eth0"); err != nil || p2 != p {
		t.Fatalf("Inspect(eth0) = %+v, %v, want %+v", p2, err, p)
	}

	const tap = "tap0"
	mustTC(t, "Attach", Attach(e.ns, p, tap))
	e.checkAttached(t, tap, false)
	if _, err := Inspect(e.ns, ""); err == nil {
		t.Error("Inspect after Attach found a single pod link; want an error naming eth0 and the tap")
	}

	tapFile := e.openTap(t, tap)
	e.admitHost(t)
	e.checkHostToTap(t, tapFile)
	e.checkTapToHost(t, tapFile, false)

	mustTC(t, "OpenGate", OpenGate(e.ns, p, tap))
	must(t, "OpenGate again", OpenGate(e.ns, p, tap))
	e.checkAttached(t, tap, true)
	e.checkTapToHost(t, tapFile, true)
	tapFile.Close()

	must(t, "Detach", Detach(e.ns, p, tap))
	e.checkDetached(t, p)
	must(t, "Detach again", Detach(e.ns, p, tap))
	e.checkDetached(t, p)
}

func (e *env) checkAttached(t *testing.T, tap string, gateOpen bool) {
	t.Helper()
	h := e.handle(t)
	tl, err := h.LinkByName(tap)
	must(t, "find tap", err)
	tt, ok := tl.(*netlink.Tuntap)
	if !ok || tt.Mode != netlink.TUNTAP_MODE_TAP {
		t.Fatalf("%s is %T %+v, want a tap", tap, tl, tl)
	}
	if tl.Attrs().Flags&net.FlagUp == 0 || tl.Attrs().MTU != podMTU {
		t.Errorf("tap flags %v MTU %d, want up and MTU %d", tl.Attrs().Flags, tl.Attrs().MTU, podMTU)
	}
	eth0, err := h.LinkByName("eth0")
	must(t, "find eth0", err)
	if rules := e.rules(t, chainToVM); len(rules) == 0 {
		t.Error("no rules in to_vm: frames for the VM are all dropped")
	}
	if rules := e.rules(t, chainFromVM); (len(rules) > 0) != gateOpen {
		t.Errorf("from_vm has %d rules with the gate open=%v", len(rules), gateOpen)
	}
	addrs, err := h.AddrList(eth0, netlink.FAMILY_V4)
	must(t, "list eth0 addresses", err)
	if len(addrs) != 0 {
		t.Errorf("eth0 still has IPv4 %v; the VM owns the IP", addrs)
	}
}

// rules lists a chain of the pod's table.
func (e *env) rules(t *testing.T, chain string) []*nftables.Rule {
	t.Helper()
	n, err := dial(e.ns)
	must(t, "dial netns", err)
	defer n.Close()
	conn, err := n.nft()
	must(t, "nftables", err)
	rules, err := conn.GetRules(filterTable(), &nftables.Chain{Name: chain})
	must(t, "list rules of "+chain, err)
	return rules
}

// hasTable reports whether the pod netns has sandlot's table.
func (e *env) hasTable(t *testing.T) bool {
	t.Helper()
	n, err := dial(e.ns)
	must(t, "dial netns", err)
	defer n.Close()
	conn, err := n.nft()
	must(t, "nftables", err)
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyNetdev)
	must(t, "list tables", err)
	for _, tb := range tables {
		if tb.Name == tableName {
			return true
		}
	}
	return false
}

// openTap attaches to the tap as QEMU would: TUNSETIFF from a thread inside
// the netns (tun resolves the name in the opener's netns).
func (e *env) openTap(t *testing.T, tap string) *os.File {
	var fd int
	must(t, "open tap in netns", Run(e.ns, func() (err error) {
		fd, err = openTun(tap, unix.IFF_TAP|unix.IFF_NO_PI)
		return err
	}))
	must(t, "nonblocking tap", unix.SetNonblock(fd, true)) // makes deadlines work
	f := os.NewFile(uintptr(fd), tap)
	t.Cleanup(func() { f.Close() })
	return f
}

// checkHostToTap sends UDP from the host to the pod IP and expects the frame
// on the tap: bridge → veth → eth0 ingress (to_vm) → tap.
func (e *env) checkHostToTap(t *testing.T, tapFile *os.File) {
	t.Helper()
	// Nobody answers ARP for the pod IP until a guest runs; pin it.
	must(t, "static neighbour", netlink.NeighSet(&netlink.Neigh{
		LinkIndex: e.br.Attrs().Index, State: netlink.NUD_PERMANENT,
		IP: e.podIP, HardwareAddr: e.podMAC,
	}))
	conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: e.podIP, Port: 40000})
	must(t, "dial pod", err)
	defer conn.Close()
	payload := []byte("host->tap " + e.nsName)
	buf := make([]byte, 65536)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		_, _ = conn.Write(payload)
		must(t, "tap deadline", tapFile.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
		for {
			k, err := tapFile.Read(buf)
			if err != nil {
				break // timeout: send again
			}
			if bytes.Contains(buf[:k], payload) {
				if !bytes.Equal(buf[:6], e.podMAC) {
					t.Errorf("frame on tap to %v, want pod MAC %v", net.HardwareAddr(buf[:6]), e.podMAC)
				}
				return
			}
		}
	}
	t.Fatal("UDP sent from the host to the pod IP never arrived on the tap")
}

// checkTapToHost writes a UDP frame as the guest would and expects it at a
// host socket only when the gate is open: tap ingress (from_vm) → eth0 →
// veth → bridge → host stack.
func (e *env) checkTapToHost(t *testing.T, tapFile *os.File, gateOpen bool) {
	t.Helper()
	ln, err := net.ListenUDP("udp4", &net.UDPAddr{IP: e.gw})
	must(t, "listen on bridge IP", err)
	defer ln.Close()
	payload := []byte(fmt.Sprintf("tap->host %s gate=%v", e.nsName, gateOpen))
	frame := udpFrame(e.br.Attrs().HardwareAddr, e.podMAC, e.podIP, e.gw, 40001, ln.LocalAddr().(*net.UDPAddr).Port, payload)
	buf := make([]byte, 2048)
	tries := 10
	if !gateOpen {
		tries = 2
	}
	for range tries {
		_, err := tapFile.Write(frame)
		must(t, "write frame to tap", err)
		must(t, "udp deadline", ln.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
		k, err := ln.Read(buf)
		switch {
		case err == nil && !gateOpen:
			t.Fatalf("frame from the tap reached the host (%q) before OpenGate", buf[:k])
		case err == nil && bytes.Equal(buf[:k], payload):
			return
		}
	}
	if gateOpen {
		t.Fatal("UDP frame written to the tap never reached the host after OpenGate")
	}
}

func udpFrame(dstMAC, srcMAC net.HardwareAddr, src, dst net.IP, sport, dport int, payload []byte) []byte {
	ip := make([]byte, 28+len(payload))
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	copy(ip[12:], src.To4())
	copy(ip[16:], dst.To4())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], uint16(sport))
	binary.BigEndian.PutUint16(udp[2:], uint16(dport))
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload))) // checksum 0 = none (IPv4)
	copy(udp[8:], payload)
	frame := append(append(append([]byte{}, dstMAC...), srcMAC...), 0x08, 0x00)
	return append(frame, ip...)
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func (e *env) checkDetached(t *testing.T, p Pod) {
	t.Helper()
	got, err := Inspect(e.ns, "") // one link again means the tap is gone
	must(t, "Inspect after Detach", err)
	if got != p {
		t.Errorf("after Detach Inspect = %+v, want %+v", got, p)
	}
	if e.hasTable(t) {
		t.Error("nftables table left in the pod netns")
	}
}

func TestDetachGoneNetns(t *testing.T) {
	e := newEnv(t)
	p, err := Inspect(e.ns, "")
	must(t, "Inspect", err)
	mustTC(t, "Attach", Attach(e.ns, p, "tap0"))
	must(t, "delete netns", netns.DeleteNamed(e.nsName))
	must(t, "Detach on deleted netns", Detach(e.ns, p, "tap0"))

	plain := filepath.Join(t.TempDir(), "netns") // what an unmounted netns path looks like
	must(t, "create plain file", os.WriteFile(plain, nil, 0o644))
	must(t, "Detach on unmounted netns", Detach(plain, p, "tap0"))
}

func TestAttachOwner(t *testing.T) {
	e := newEnv(t)
	p, err := Inspect(e.ns, "")
	must(t, "Inspect", err)
	mustTC(t, "Attach", Attach(e.ns, p, "tap1", WithOwner(65534, 65534)))
	t.Cleanup(func() { _ = Detach(e.ns, p, "tap1") })
	l, err := e.handle(t).LinkByName("tap1")
	must(t, "find tap", err)
	if tt := l.(*netlink.Tuntap); tt.Owner != 65534 || tt.Group != 65534 {
		t.Errorf("tap owner %d group %d, want 65534", tt.Owner, tt.Group)
	}
	if err := Attach(e.ns, p, "tap1"); err == nil {
		t.Error("second Attach adopted the existing tap; want an error")
	}
	if _, err := e.handle(t).LinkByName("tap1"); err != nil {
		t.Errorf("failed Attach removed a tap it did not create: %v", err)
	}
}

func TestAttachRollback(t *testing.T) {
	e := newEnv(t)
	p, err := Inspect(e.ns, "")
	must(t, "Inspect", err)
	bad := p
	bad.Interface = "eth9"
	if err := Attach(e.ns, bad, "tap2"); err == nil || !strings.Contains(err.Error(), e.ns) {
		t.Fatalf("Attach with a missing pod link = %v, want an error naming the netns", err)
	}
	if _, err := e.handle(t).LinkByName("tap2"); err == nil {
		t.Error("failed Attach left its tap behind")
	}
	if got, err := Inspect(e.ns, ""); err != nil || got != p {
		t.Errorf("pod after failed Attach: %+v, %v; want %+v", got, err, p)
	}
}

func TestRun(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("needs ip: install iproute2 (apt-get install iproute2): %v", err)
	}
	e := newEnv(t)
	var out []byte
	must(t, "Run", Run(e.ns, func() (err error) {
		out, err = exec.Command("ip", "-o", "link", "show").Output()
		return err
	}))
	if !strings.Contains(string(out), " eth0@") || strings.Contains(string(out), e.hostVeth) {
		t.Errorf("ip link started under Run does not see the pod netns:\n%s", out)
	}
	sentinel := errors.New("fn failed")
	if err := Run(e.ns, func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Errorf("Run = %v, want fn's error", err)
	}
	if err := Run(filepath.Join(t.TempDir(), "missing"), func() error { return nil }); err == nil {
		t.Error("Run on a missing netns succeeded")
	}
}

package podnet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// admitHost lets the host (the bridge's address) open connections to
// the VM, as the shim admits its node.
func (e *env) admitHost(t *testing.T) {
	t.Helper()
	e.update(t, Policy{IngressFrom: []netip.Prefix{netip.PrefixFrom(e.gwAddr(), 32)}})
}

func (e *env) update(t *testing.T, p Policy) {
	t.Helper()
	f, err := OpenFilter(e.ns)
	must(t, "OpenFilter", err)
	defer f.Close()
	must(t, "Update", f.Update(p))
}

func (e *env) gwAddr() netip.Addr { a, _ := netip.AddrFromSlice(e.gw.To4()); return a }

// attached is a pod whose VM (the test, through the tap) has its gate open.
func attached(t *testing.T, opts ...Option) (*env, *os.File) {
	e := newEnv(t)
	p, err := Inspect(e.ns, "")
	must(t, "Inspect", err)
	mustTC(t, "Attach", Attach(e.ns, p, "tap0", opts...))
	t.Cleanup(func() { _ = Detach(e.ns, p, "tap0") })
	tapFile := e.openTap(t, "tap0")
	mustTC(t, "OpenGate", OpenGate(e.ns, p, "tap0", opts...))
	return e, tapFile
}

// sendsToHost writes frame on the tap a few times and reports whether a
// host socket on the bridge address port got payload.
func (e *env) reachesHost(t *testing.T, tapFile *os.File, ln *net.UDPConn, frame, payload []byte) bool {
	t.Helper()
	buf := make([]byte, 2048)
	for range 3 {
		_, err := tapFile.Write(frame)
		must(t, "write frame", err)
		must(t, "deadline", ln.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
		if k, err := ln.Read(buf); err == nil && bytes.Equal(buf[:k], payload) {
			return true
		}
	}
	return false
}

func listenGW(t *testing.T, e *env) (*net.UDPConn, int) {
	ln, err := net.ListenUDP("udp4", &net.UDPAddr{IP: e.gw})
	must(t, "listen on bridge IP", err)
	t.Cleanup(func() { ln.Close() })
	return ln, ln.LocalAddr().(*net.UDPAddr).Port
}

// TestSpoofedFramesStayIn: a guest forging its source MAC or IP, or an
// ARP sender, gets nothing out of the pod; its own identity does.
func TestSpoofedFramesStayIn(t *testing.T) {
	e, tapFile := attached(t)
	ln, port := listenGW(t, e)
	otherMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x66}
	forgedIP := net.ParseIP(e.prefix + ".77")
	dst := e.br.Attrs().HardwareAddr
	for _, c := range []struct {
		name    string
		mac     net.HardwareAddr
		ip      net.IP
		leaves  bool
		payload string
	}{
		{"own identity", e.podMAC, e.podIP, true, "own"},
		{"forged MAC", otherMAC, e.podIP, false, "mac"},
		{"forged IP", e.podMAC, forgedIP, false, "ip"},
	} {
		payload := []byte(c.payload + e.nsName)
		got := e.reachesHost(t, tapFile, ln, udpFrame(dst, c.mac, c.ip, e.gw, 40001, port, payload), payload)
		if got != c.leaves {
			t.Errorf("%s: reached the host = %v, want %v", c.name, got, c.leaves)
		}
	}
	for _, c := range []struct {
		name   string
		sha    net.HardwareAddr
		spa    net.IP
		answer bool
	}{{"own ARP", e.podMAC, e.podIP, true}, {"ARP for a forged IP", e.podMAC, forgedIP, false}, {"ARP with a forged MAC", otherMAC, e.podIP, false}} {
		if got := e.arpAnswered(t, tapFile, c.sha, c.spa); got != c.answer {
			t.Errorf("%s: the host answered = %v, want %v", c.name, got, c.answer)
		}
	}
}

// arpAnswered sends "who has <gateway>" from sha/spa and waits for the
// host's reply on the tap (it answers only what reached it).
func (e *env) arpAnswered(t *testing.T, tapFile *os.File, sha net.HardwareAddr, spa net.IP) bool {
	t.Helper()
	frame := append(append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, e.podMAC...), 0x08, 0x06)
	arp := make([]byte, 28)
	binary.BigEndian.PutUint16(arp[0:], 1)
	binary.BigEndian.PutUint16(arp[2:], unix.ETH_P_IP)
	arp[4], arp[5] = 6, 4
	binary.BigEndian.PutUint16(arp[6:], 1)
	copy(arp[8:], sha)
	copy(arp[14:], spa.To4())
	copy(arp[24:], e.gw.To4())
	frame = append(frame, arp...)
	buf := make([]byte, 2048)
	for range 3 {
		_, err := tapFile.Write(frame)
		must(t, "write ARP", err)
		must(t, "deadline", tapFile.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
		for {
			k, err := tapFile.Read(buf)
			if err != nil {
				break
			}
			if k >= 42 && buf[12] == 0x08 && buf[13] == 0x06 && binary.BigEndian.Uint16(buf[20:]) == 2 &&
				bytes.Equal(buf[38:42], spa.To4()) {
				return true
			}
		}
	}
	return false
}

// TestEgressRules: a denied destination is refused (the VM gets an ICMP
// admin-prohibited at once), allowOut beats the deny, a learned address
// passes for its TTL only.
// sender sends a UDP datagram from the VM to the host, a new flow each
// time (an open one outlives a rule change), and reports whether it
// arrived.
func sender(t *testing.T, e *env, tapFile *os.File, sport int) func(tag string) bool {
	ln, port := listenGW(t, e)
	return func(tag string) bool {
		sport++
		payload := []byte(fmt.Sprintf("%s %d %s", tag, sport, e.nsName)) // unique: a late copy of an earlier one is not it
		return e.reachesHost(t, tapFile, ln, udpFrame(e.br.Attrs().HardwareAddr, e.podMAC, e.podIP, e.gw, sport, port, payload), payload)
	}
}

func TestEgressRules(t *testing.T) {
	e, tapFile := attached(t)
	gw := netip.PrefixFrom(e.gwAddr(), 32)
	send := sender(t, e, tapFile, 41000)
	if !send("open") {
		t.Fatal("with no rules, the host (a non-denied address) was not reached")
	}
	e.update(t, Policy{DenyOut: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
	if send("denied") {
		t.Error("a destination in the deny set was reached")
	}
	if !e.sawICMPProhibited(t, tapFile) {
		t.Error("the VM got no ICMP admin-prohibited for a denied destination")
	}
	e.update(t, Policy{DenyOut: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("0.0.0.0/0")},
		AllowOut: []netip.Prefix{gw, netip.MustParsePrefix("10.0.0.0/8")}})
	if !send("allowed") {
		t.Error("allowOut did not beat the deny set")
	}
	e.update(t, Policy{Blocked: []netip.Prefix{gw}, AllowOut: []netip.Prefix{gw}})
	if send("blocked") {
		t.Error("allowOut opened a blocked address (the node's own)")
	}
	e.update(t, Policy{DenyOut: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
	f, err := OpenFilter(e.ns)
	must(t, "OpenFilter", err)
	defer f.Close()
	must(t, "Learn", f.Learn([]netip.Addr{e.gwAddr()}, 2*time.Second))
	if !send("learned") {
		t.Error("a learned address did not pass")
	}
	// The element times out within 2 s: poll (each try is a new flow)
	// until new flows fail, for at most 5 s.
	learnedAt := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for time.Since(learnedAt) < 5*time.Second && send("expiring") {
		<-tick.C
	}
	if send("expired") {
		t.Error("a learned address still passed 5 s after a 2 s TTL")
	}
}

// TestPlatformDenials: the operator's denials hold against the sandbox's
// allowOut and its learned addresses, except inside an openable range.
func TestPlatformDenials(t *testing.T) {
	e, tapFile := attached(t)
	gw := netip.PrefixFrom(e.gwAddr(), 32)
	wide := netip.MustParsePrefix("0.0.0.0/0")
	send := sender(t, e, tapFile, 43000)
	e.update(t, Policy{Platform: []netip.Prefix{gw}, AllowOut: []netip.Prefix{gw, wide}})
	if send("allowed") {
		t.Error("allowOut opened a platform denial")
	}
	f, err := OpenFilter(e.ns)
	must(t, "OpenFilter", err)
	defer f.Close()
	must(t, "Learn", f.Learn([]netip.Addr{e.gwAddr()}, time.Minute))
	e.update(t, Policy{Platform: []netip.Prefix{gw}, DenyOut: []netip.Prefix{wide}})
	if send("learned") {
		t.Error("a learned address (a DNS answer) opened a platform denial")
	}
	e.update(t, Policy{Platform: []netip.Prefix{gw}, Openable: []netip.Prefix{gw}, DenyOut: []netip.Prefix{wide}})
	if !send("learned-openable") {
		t.Error("a learned address inside an openable range did not pass")
	}
	must(t, "Update", f.Update(Policy{Platform: []netip.Prefix{gw}, Openable: []netip.Prefix{gw}}))
	f.conn.FlushSet(f.sets[setLearned])
	must(t, "flush the learned set", f.conn.Flush())
	if send("openable-not-allowed") {
		t.Error("an openable range passed without an allowOut naming it")
	}
	e.update(t, Policy{Platform: []netip.Prefix{gw}, Openable: []netip.Prefix{gw}, AllowOut: []netip.Prefix{gw}})
	if !send("openable-allowed") {
		t.Error("allowOut did not open an openable range")
	}
}

// sawICMPProhibited waits for an ICMP unreachable/admin-prohibited on the
// tap (what reject sends back to the VM).
func (e *env) sawICMPProhibited(t *testing.T, tapFile *os.File) bool {
	t.Helper()
	buf := make([]byte, 2048)
	must(t, "deadline", tapFile.SetReadDeadline(time.Now().Add(time.Second)))
	for {
		k, err := tapFile.Read(buf)
		if err != nil {
			return false
		}
		if k >= 36 && buf[12] == 0x08 && buf[13] == 0 && buf[14+9] == unix.IPPROTO_ICMP && buf[34] == 3 && buf[35] == 13 {
			return true
		}
	}
}

// TestIngressClosed: the host cannot open a connection to the VM unless
// admitted; replies to a flow the VM opened come back either way.
func TestIngressClosed(t *testing.T) {
	e, tapFile := attached(t)
	e.update(t, Policy{})
	if e.hostReachesTap(t, tapFile, nil, "closed") {
		t.Fatal("a new connection from a non-admitted address reached the VM")
	}
	// The VM opens a flow to the host's port; the host's reply passes.
	ln, port := listenGW(t, e)
	e.pinPodNeighbour(t)
	payload := []byte("out" + e.nsName)
	if !e.reachesHost(t, tapFile, ln, udpFrame(e.br.Attrs().HardwareAddr, e.podMAC, e.podIP, e.gw, 40003, port, payload), payload) {
		t.Fatal("the VM's own flow to the host did not leave")
	}
	reply := func(b []byte) error { _, err := ln.WriteToUDP(b, &net.UDPAddr{IP: e.podIP, Port: 40003}); return err }
	if !e.hostReachesTap(t, tapFile, reply, "reply") {
		t.Error("the reply to a flow the VM opened did not reach it")
	}
	e.update(t, Policy{Ingress: true})
	if !e.hostReachesTap(t, tapFile, nil, "open") {
		t.Error("with ingress open, a new connection did not reach the VM")
	}
}

// hostReachesTap sends UDP from the host with send (a fresh socket when
// nil) and looks for it on the tap.
func (e *env) hostReachesTap(t *testing.T, tapFile *os.File, send func([]byte) error, tag string) bool {
	t.Helper()
	e.pinPodNeighbour(t)
	if send == nil {
		conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: e.podIP, Port: 40100})
		must(t, "dial pod", err)
		defer conn.Close()
		send = func(b []byte) error { _, err := conn.Write(b); return err }
	}
	payload := []byte(fmt.Sprintf("%s %s", tag, e.nsName))
	buf := make([]byte, 65536)
	for range 3 {
		must(t, "send from the host", send(payload))
		must(t, "deadline", tapFile.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
		for {
			k, err := tapFile.Read(buf)
			if err != nil {
				break
			}
			if bytes.Contains(buf[:k], payload) {
				return true
			}
		}
	}
	return false
}

// pinPodNeighbour: nobody answers ARP for the pod IP until a guest runs.
func (e *env) pinPodNeighbour(t *testing.T) {
	must(t, "static neighbour", netlink.NeighSet(&netlink.Neigh{
		LinkIndex: e.br.Attrs().Index, State: netlink.NUD_PERMANENT, IP: e.podIP, HardwareAddr: e.podMAC}))
}

// TestResolverInThePodNetns: the VM's DNS to the resolver address (sent
// to its gateway's MAC, as a guest routes it) reaches a socket in the pod
// netns, and the answer comes back on the tap.
func TestResolverInThePodNetns(t *testing.T) {
	resolver := netip.MustParseAddr("169.254.53.53")
	e, tapFile := attached(t, WithResolver(resolver))
	var ln *net.UDPConn
	must(t, "listen in the pod netns", Run(e.ns, func() (err error) {
		ln, err = net.ListenUDP("udp4", &net.UDPAddr{IP: resolver.AsSlice(), Port: DNSPort})
		return err
	}))
	defer ln.Close()
	payload := []byte("query " + e.nsName)
	frame := udpFrame(e.br.Attrs().HardwareAddr, e.podMAC, e.podIP, resolver.AsSlice(), 40200, DNSPort, payload)
	if !e.reachesHost(t, tapFile, ln, frame, payload) {
		t.Fatal("the VM's query never reached the resolver's socket in the pod netns")
	}
	answer := []byte("answer " + e.nsName)
	if !e.hostReachesTap(t, tapFile, func(b []byte) error {
		_, err := ln.WriteToUDP(b, &net.UDPAddr{IP: e.podIP, Port: 40200})
		return err
	}, string(answer)) {
		t.Error("the resolver's answer did not reach the VM")
	}
}

func TestPolicyPermits(t *testing.T) {
	pfx := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	p := Policy{Blocked: pfx("192.168.1.5/32"), Platform: pfx("10.0.0.0/8", "192.168.0.0/16"), Openable: pfx("10.1.0.0/16"),
		AllowOut: pfx("10.1.2.3/32", "10.9.9.9/32", "203.0.113.7/32"), DenyOut: pfx("203.0.113.0/24")}
	for _, c := range []struct {
		addr  string
		named bool
		want  bool
	}{
		{"192.168.1.5", true, false}, // the node: never
		{"10.1.2.3", false, true},    // openable and allowed
		{"10.1.7.7", true, true},     // openable and a named domain's answer
		{"10.1.7.7", false, false},   // openable but not opened
		{"10.9.9.9", false, false},   // allowed, but a platform denial outside openable
		{"198.51.100.1", false, true},
		{"203.0.113.7", false, true}, // allow beats deny
		{"203.0.113.8", false, false},
		{"203.0.113.8", true, true}, // a named domain's answer beats deny
	} {
		if got := p.Permits(netip.MustParseAddr(c.addr), c.named); got != c.want {
			t.Errorf("Permits(%s, named %v) = %v, want %v", c.addr, c.named, got, c.want)
		}
	}
}

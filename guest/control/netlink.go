package control

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/identity"
)

// nic is what the agent keeps between identities of its NIC: the
// netlink and ioctl sockets and the link index. A restored clone reuses
// them — they are kernel state in the snapshot's memory — because under
// TCG opening them again costs tens of milliseconds of first-run code.
// manualLL records that the kernel generates no link-local on the NIC
// (addr_gen_mode none, set before its first up; llDecided once tried);
// ll is the one apply added for an IPv6 identity. dropped: dropNetwork
// removed the NIC's address and neighbours.
type nic struct {
	mu        sync.Mutex
	name      string
	index     int
	ioctlFD   int
	nl        *rtnl
	manualLL  bool
	llDecided bool
	ll        netip.Prefix
	dropped   bool
}

// open (re)opens the sockets and looks up the link when the NIC is new.
func (c *nic) open(name string) error {
	if c.nl != nil && c.name == name {
		return nil
	}
	c.close()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("interface %s: %w", name, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		err = unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("interface %s: %w", name, err)
	}
	nl, err := dialRTNL()
	if err != nil {
		unix.Close(fd)
		return err
	}
	c.name, c.index, c.ioctlFD, c.nl = name, int(ifr.Uint32()), fd, nl
	c.manualLL, c.llDecided, c.ll, c.dropped = false, false, netip.Prefix{}, false
	return nil
}

func (c *nic) close() {
	if c.nl != nil {
		c.nl.close()
		unix.Close(c.ioctlFD)
		c.nl = nil
	}
}

// mac reads the NIC's MAC with SIOCGIFHWADDR: x/sys's Ifreq has no
// accessor for ifr_hwaddr's raw bytes.
func (c *nic) mac() (net.HardwareAddr, error) {
	var req struct {
		Name   [unix.IFNAMSIZ]byte
		Family uint16
		Data   [14]byte
		_      [8]byte
	}
	copy(req.Name[:], c.name)
	if _, _, e := unix.RawSyscall(unix.SYS_IOCTL, uintptr(c.ioctlFD), unix.SIOCGIFHWADDR, uintptr(unsafe.Pointer(&req))); e != 0 {
		return nil, fmt.Errorf("mac of %s: %w", c.name, e)
	}
	return net.HardwareAddr(append([]byte(nil), req.Data[:6]...)), nil
}

// apply moves the NIC to a new identity in the order proven in
// reference/recipes/vm-pod-networking.md, so that the old address is
// never announced with the new MAC nor the reverse:
//
//  1. drop the old addresses of the new address's family (none after
//     dropNetwork);
//  2. link up, with the new MAC if it changes (see setMACUp);
//  3. add the new address; replace the default route;
//  4. flush the neighbour table of the NIC (empty after dropNetwork).
//
// IPv6 link-locals: before the NIC's first up the kernel is told to
// generate none (a snapshot would carry one derived from its MAC into
// every clone, a duplicate on the bridge, and its timers would send
// MLD and router solicitations from the old MAC). An IPv6 identity gets
// the link-local of its MAC, added here.
//
// It uses rtnetlink directly: the sandbox's rootfs need not have iproute2.
// took, when not nil, is told the end of each step (the guest's step
// timings a restore trace shows).
func (c *nic) apply(n identity.Network, prev *identity.Network, took func(step string)) error {
	if took == nil {
		took = func(string) {}
	}
	name, prefix, gw, mac, err := parseNetwork(n)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(name); err != nil {
		return err
	}
	hw, err := c.mac()
	if err != nil {
		return err
	}
	took("net.open")
	have := false
	if !c.dropped { // nothing left to drop
		if have, err = dropOldAddresses(c.nl, name, c.index, prefix, prev); err != nil {
			return err
		}
		took("net.drop")
	}
	if !c.llDecided {
		c.manualLL, c.llDecided = c.disableAutoLinkLocal(), true
	}
	if mac != nil && mac.String() != hw.String() {
		if err := c.setMACUp(mac); err != nil {
			return err
		}
		hw = mac
		took("net.mac")
	} else {
		if err := c.nl.link(c.index, unix.IFF_UP, unix.IFF_UP, nil); err != nil {
			return fmt.Errorf("set %s up: %w", name, err)
		}
		took("net.up")
	}
	if prefix.Addr().Is6() && c.manualLL && !c.ll.IsValid() {
		ll := eui64LinkLocal(hw)
		if err := c.nl.addrFlags(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, c.index, ll, unix.IFA_F_NODAD, unix.RT_SCOPE_LINK); err != nil {
			return fmt.Errorf("link-local of %s: %w", name, err)
		}
		c.ll = ll
	}
	if !have {
		if err := c.nl.addr(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, c.index, prefix); err != nil {
			return fmt.Errorf("add %s to %s: %w", prefix, name, err)
		}
		took("net.addr")
	}
	if gw.IsValid() {
		if err := c.nl.defaultRoute(c.index, gw); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
		took("net.route")
	}
	if !c.dropped {
		if err := c.nl.flushNeighbours(c.index); err != nil {
			return fmt.Errorf("flush neighbours of %s: %w", name, err)
		}
		took("net.neigh")
	}
	c.dropped = false
	return nil
}

// dropNetwork removes the NIC's address n (with its routes) and its
// neighbours.
func (c *nic) dropNetwork(n identity.Network) error {
	name, prefix, _, _, err := parseNetwork(n)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(name); err != nil {
		return err
	}
	if err := c.nl.addr(unix.RTM_DELADDR, 0, c.index, prefix); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("drop %s from %s: %w", prefix, name, err)
	}
	if err := c.nl.flushNeighbours(c.index); err != nil {
		return fmt.Errorf("flush neighbours of %s: %w", name, err)
	}
	c.dropped = true
	return nil
}

func (c *nic) networkDropped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// disableAutoLinkLocal sets the NIC's addr_gen_mode to none while it is
// down (its first up, at boot); false when that is not possible (no
// IPv6, or the link is up already).
func (c *nic) disableAutoLinkLocal() bool {
	ifr, err := unix.NewIfreq(c.name)
	if err != nil || unix.IoctlIfreq(c.ioctlFD, unix.SIOCGIFFLAGS, ifr) != nil || ifr.Uint16()&unix.IFF_UP != 0 {
		return false
	}
	return os.WriteFile("/proc/sys/net/ipv6/conf/"+c.name+"/addr_gen_mode", []byte("1\n"), 0o644) == nil
}

// setMACUp gives the NIC a new MAC and sets it up, in one request.
// Where the kernel generates no link-local (manualLL), virtio-net changes
// the MAC live, the link staying up: under TCG that is the cheap path, as
// a link down/up runs the guest's device teardown and bring-up and waits
// for RCU grace periods; the link-local apply added for the old MAC goes.
// Otherwise — or when the driver refuses a live change (EBUSY) — the link
// goes down first, and the up regenerates the kernel's link-local.
func (c *nic) setMACUp(mac net.HardwareAddr) error {
	attrs := rtattr(nil, unix.IFLA_ADDRESS, mac)
	if c.manualLL {
		err := c.nl.link(c.index, unix.IFF_UP, unix.IFF_UP, attrs)
		if err == nil {
			return c.dropLinkLocal()
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("set %s mac %s: %w", c.name, mac, err)
		}
	}
	if err := c.nl.link(c.index, 0, unix.IFF_UP, nil); err != nil {
		return fmt.Errorf("set %s down: %w", c.name, err)
	}
	if err := c.nl.link(c.index, unix.IFF_UP, unix.IFF_UP, attrs); err != nil {
		return fmt.Errorf("set %s mac %s: %w", c.name, mac, err)
	}
	c.ll = netip.Prefix{} // the down removed it
	return nil
}

// dropLinkLocal removes the link-local apply added for the old MAC.
func (c *nic) dropLinkLocal() error {
	if !c.ll.IsValid() {
		return nil
	}
	if err := c.nl.addr(unix.RTM_DELADDR, 0, c.index, c.ll); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("drop the old link-local of %s: %w", c.name, err)
	}
	c.ll = netip.Prefix{}
	return nil
}

// eui64LinkLocal is fe80::/64 with the modified EUI-64 of a 6-byte MAC.
func eui64LinkLocal(mac net.HardwareAddr) netip.Prefix {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	if len(mac) == 6 {
		a[8], a[9], a[10] = mac[0]^0x02, mac[1], mac[2]
		a[11], a[12] = 0xff, 0xfe
		a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	}
	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}

// dropOldAddresses removes the addresses of prefix's family that are not
// prefix (link-local ones stay) and reports whether prefix is there
// already. The identity this agent set last names the old address; only
// without one are the NIC's addresses listed.
func dropOldAddresses(nl *rtnl, name string, index int, prefix netip.Prefix, prev *identity.Network) (bool, error) {
	var old []netip.Prefix
	if prev != nil && prev.Address != "" && (prev.Interface == "" || prev.Interface == name) {
		p, err := netip.ParsePrefix(prev.Address)
		if err == nil {
			old = append(old, p)
		}
	} else {
		ifc, err := net.InterfaceByIndex(index)
		if err != nil {
			return false, fmt.Errorf("interface %s: %w", name, err)
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return false, fmt.Errorf("addresses of %s: %w", name, err)
		}
		for _, a := range addrs {
			if p, ok := ipnetPrefix(a); ok {
				old = append(old, p)
			}
		}
	}
	have := false
	for _, p := range old {
		if p.Addr().Is4() != prefix.Addr().Is4() || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if p == prefix {
			have = true
			continue
		}
		if err := nl.addr(unix.RTM_DELADDR, 0, index, p); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return false, fmt.Errorf("drop %s from %s: %w", p, name, err)
		}
	}
	return have, nil
}

func parseNetwork(n identity.Network) (name string, prefix netip.Prefix, gw netip.Addr, mac net.HardwareAddr, err error) {
	name = n.Interface
	if name == "" {
		name = "eth0"
	}
	if prefix, err = netip.ParsePrefix(n.Address); err != nil {
		return "", prefix, gw, nil, fmt.Errorf("address %q: %w", n.Address, err)
	}
	if n.Gateway != "" {
		if gw, err = netip.ParseAddr(n.Gateway); err != nil {
			return "", prefix, gw, nil, fmt.Errorf("gateway %q: %w", n.Gateway, err)
		}
		if gw.Is4() != prefix.Addr().Is4() {
			return "", prefix, gw, nil, fmt.Errorf("gateway %s and address %s are of different families", gw, prefix)
		}
	}
	if n.MAC != "" {
		if mac, err = net.ParseMAC(n.MAC); err != nil {
			return "", prefix, gw, nil, fmt.Errorf("mac %q: %w", n.MAC, err)
		}
	}
	return name, prefix, gw, mac, nil
}

func ipnetPrefix(a net.Addr) (netip.Prefix, bool) {
	ipn, ok := a.(*net.IPNet)
	if !ok {
		return netip.Prefix{}, false
	}
	addr, ok := netip.AddrFromSlice(ipn.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := ipn.Mask.Size()
	return netip.PrefixFrom(addr.Unmap(), ones), true
}

// rtnl is a minimal rtnetlink client (requests with ack, and dumps).
type rtnl struct {
	fd  int
	seq uint32
	buf []byte
}

func dialRTNL() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	return &rtnl{fd: fd, buf: make([]byte, 64<<10)}, nil
}

func (r *rtnl) close() { unix.Close(r.fd) }

// do sends one request; for a dump it returns the payloads of the replies.
func (r *rtnl) do(typ, flags uint16, body []byte) ([][]byte, error) {
	r.seq++
	dump := flags&unix.NLM_F_DUMP == unix.NLM_F_DUMP
	flags |= unix.NLM_F_REQUEST
	if !dump {
		flags |= unix.NLM_F_ACK
	}
	msg := binary.NativeEndian.AppendUint32(nil, uint32(unix.SizeofNlMsghdr+len(body)))
	msg = binary.NativeEndian.AppendUint16(msg, typ)
	msg = binary.NativeEndian.AppendUint16(msg, flags)
	msg = binary.NativeEndian.AppendUint32(msg, r.seq)
	msg = binary.NativeEndian.AppendUint32(msg, 0)
	msg = append(msg, body...)
	if err := rawSend(r.fd, msg); err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		n, err := r.recv()
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(r.buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Seq != r.seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("short netlink error")
				}
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return nil, unix.Errno(-e)
				}
				return out, nil
			default:
				out = append(out, append([]byte(nil), m.Data...))
			}
		}
	}
}

// rawSend and recv use raw system calls: rtnetlink handles a request
// in the sender's sendmsg, so neither blocks (a recv that would is
// retried as an ordinary, blocking one). The Go runtime's syscall
// bookkeeping around each call — under TCG slow enough that its
// monitor hands the P to another thread on every call — is skipped.
func rawSend(fd int, msg []byte) error {
	var sa unix.RawSockaddrNetlink
	sa.Family = unix.AF_NETLINK
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)), 0,
		uintptr(unsafe.Pointer(&sa)), unix.SizeofSockaddrNetlink)
	if e != 0 {
		return e
	}
	return nil
}

func (r *rtnl) recv() (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(r.fd), uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)),
		unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN {
		m, _, err := unix.Recvfrom(r.fd, r.buf, 0)
		return m, err
	}
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rtattr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofRtAttr+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// link changes an existing link's flags (within change) and attributes.
func (r *rtnl) link(index int, flags, change uint32, attrs []byte) error {
	b := []byte{unix.AF_UNSPEC, 0, 0, 0}
	b = binary.NativeEndian.AppendUint32(b, uint32(index))
	b = binary.NativeEndian.AppendUint32(b, flags)
	b = binary.NativeEndian.AppendUint32(b, change)
	_, err := r.do(unix.RTM_NEWLINK, 0, append(b, attrs...))
	return err
}

func family(a netip.Addr) byte {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// addr adds (RTM_NEWADDR) or deletes (RTM_DELADDR) an address.
func (r *rtnl) addr(typ, flags uint16, index int, p netip.Prefix) error {
	return r.addrFlags(typ, flags, index, p, 0, unix.RT_SCOPE_UNIVERSE)
}

// addrFlags is addr with ifaddrmsg flags (IFA_F_*) and a scope.
func (r *rtnl) addrFlags(typ, flags uint16, index int, p netip.Prefix, ifaFlags, scope byte) error {
	a := p.Addr()
	b := []byte{family(a), byte(p.Bits()), ifaFlags, scope}
	b = binary.NativeEndian.AppendUint32(b, uint32(index))
	b = rtattr(b, unix.IFA_LOCAL, a.AsSlice())
	b = rtattr(b, unix.IFA_ADDRESS, a.AsSlice())
	if a.Is4() && typ == unix.RTM_NEWADDR && p.Bits() < 31 {
		bc := a.As4()
		host := ^uint32(0) >> p.Bits()
		v := binary.BigEndian.Uint32(bc[:]) | host
		binary.BigEndian.PutUint32(bc[:], v)
		b = rtattr(b, unix.IFA_BROADCAST, bc[:])
	}
	_, err := r.do(typ, flags, b)
	return err
}

// defaultRoute replaces the main table's default route.
func (r *rtnl) defaultRoute(index int, gw netip.Addr) error {
	b := []byte{family(gw), 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST}
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = rtattr(b, unix.RTA_GATEWAY, gw.AsSlice())
	b = rtattr(b, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(index)))
	_, err := r.do(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, b)
	return err
}

// flushNeighbours deletes the dynamic neighbour entries of a link (what
// `ip neigh flush dev` does).
func (r *rtnl) flushNeighbours(index int) error {
	req := make([]byte, 12) // ndmsg, AF_UNSPEC: every family
	msgs, err := r.do(unix.RTM_GETNEIGH, unix.NLM_F_DUMP, req)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if len(m) < 12 {
			continue
		}
		ifindex := int32(binary.NativeEndian.Uint32(m[4:8]))
		state := binary.NativeEndian.Uint16(m[8:10])
		if int(ifindex) != index || state&(unix.NUD_PERMANENT|unix.NUD_NOARP) != 0 {
			continue
		}
		dst := findAttr(m[12:], unix.NDA_DST)
		if dst == nil {
			continue
		}
		del := append([]byte(nil), m[:12]...)
		del = rtattr(del, unix.NDA_DST, dst)
		if _, err := r.do(unix.RTM_DELNEIGH, 0, del); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	return nil
}

// findAttr returns the value of the first attribute of type typ.
func findAttr(b []byte, typ uint16) []byte {
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		t := binary.NativeEndian.Uint16(b[2:4])
		if l < unix.SizeofRtAttr || l > len(b) {
			return nil
		}
		if t == typ {
			return b[unix.SizeofRtAttr:l]
		}
		l = (l + 3) &^ 3
		if l > len(b) {
			return nil
		}
		b = b[l:]
	}
	return nil
}

package server

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
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
	if err := c.up(mac, hw, prefix.Addr().Is6(), took); err != nil {
		return err
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

// up is apply's step 2: the link up, with mac when it differs from the
// current hw; an IPv6 identity then gets the link-local of the MAC the
// NIC ends up with, which the kernel was told not to generate.
func (c *nic) up(mac, hw net.HardwareAddr, v6 bool, took func(step string)) error {
	if mac != nil && mac.String() != hw.String() {
		if err := c.setMACUp(mac); err != nil {
			return err
		}
		hw = mac
		took("net.mac")
	} else {
		if err := c.nl.link(c.index, unix.IFF_UP, unix.IFF_UP, nil); err != nil {
			return fmt.Errorf("set %s up: %w", c.name, err)
		}
		took("net.up")
	}
	if v6 && c.manualLL && !c.ll.IsValid() {
		ll := eui64LinkLocal(hw)
		if err := c.nl.addrFlags(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, c.index, ll, unix.IFA_F_NODAD, unix.RT_SCOPE_LINK); err != nil {
			return fmt.Errorf("link-local of %s: %w", c.name, err)
		}
		c.ll = ll
	}
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

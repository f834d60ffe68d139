package podnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Pod is what the guest must take over from the pod's interface.
type Pod struct {
	Interface string // e.g. eth0
	Address   string // CIDR "10.89.0.5/24"
	Gateway   string // default route's gateway, "" if none
	MAC       string // the veth's MAC (the guest takes it, so CNI's view and macspoofchk hold)
	MTU       int
}

// Inspect reads the pod interface (the single non-loopback link, or ifName if
// set) inside the netns at nsPath. Call it before Attach: Attach moves the
// address to the guest and adds the tap as a second link.
func Inspect(nsPath, ifName string) (Pod, error) {
	n, err := dial(nsPath)
	if err != nil {
		return Pod{}, err
	}
	defer n.Close()
	link, err := n.podLink(ifName)
	if err != nil {
		return Pod{}, err
	}
	addr, err := n.podAddr(link)
	if err != nil {
		return Pod{}, err
	}
	gw, err := n.gateway(link)
	if err != nil {
		return Pod{}, err
	}
	a := link.Attrs()
	return Pod{
		Interface: a.Name,
		Address:   addr.IPNet.String(),
		Gateway:   gw,
		MAC:       a.HardwareAddr.String(),
		MTU:       a.MTU,
	}, nil
}

func (n *podNS) podLink(ifName string) (netlink.Link, error) {
	if ifName != "" {
		return n.link(ifName)
	}
	links, err := dump(n.h.LinkList)
	if err != nil {
		return nil, n.errorf(err, "list links")
	}
	var found []netlink.Link
	var names []string
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback == 0 {
			found = append(found, l)
			names = append(names, l.Attrs().Name)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("want exactly one non-loopback link in netns %s, found %v: name the pod interface", n.path, names)
	}
	return found[0], nil
}

// podAddr insists on a single IPv4 address: the guest can take over only one,
// and Detach could not put back what Pod does not record.
func (n *podNS) podAddr(link netlink.Link) (netlink.Addr, error) {
	addrs, err := dump(func() ([]netlink.Addr, error) { return n.h.AddrList(link, netlink.FAMILY_V4) })
	if err != nil {
		return netlink.Addr{}, n.errorf(err, "list IPv4 addresses of %s", link.Attrs().Name)
	}
	if len(addrs) != 1 {
		return netlink.Addr{}, fmt.Errorf("want exactly one IPv4 address on %s in netns %s, found %d", link.Attrs().Name, n.path, len(addrs))
	}
	return addrs[0], nil
}

func (n *podNS) gateway(link netlink.Link) (string, error) {
	routes, err := dump(func() ([]netlink.Route, error) { return n.h.RouteList(link, netlink.FAMILY_V4) })
	if err != nil {
		return "", n.errorf(err, "list IPv4 routes of %s", link.Attrs().Name)
	}
	for _, r := range routes {
		if isDefault(r) && r.Gw != nil {
			return r.Gw.String(), nil
		}
	}
	return "", nil
}

// isDefault accepts both spellings netlink versions use for 0.0.0.0/0.
func isDefault(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

// Option tunes Attach and OpenGate.
type Option func(*options)

type options struct {
	owner    bool
	uid, gid int
	resolver netip.Addr
}

// WithOwner makes the tap openable by an unprivileged QEMU running as
// uid/gid; otherwise attaching to it needs CAP_NET_ADMIN.
func WithOwner(uid, gid int) Option {
	return func(o *options) { o.owner, o.uid, o.gid = true, uid, gid }
}

// WithResolver gives the netns the resolver address on the tap (with a
// route and a fixed neighbour for the pod IP, so its answers reach the
// VM) and lets the VM's DNS to it through to this netns's stack.
func WithResolver(a netip.Addr) Option {
	return func(o *options) { o.resolver = a }
}

// Attach creates tap `tap` in the netns (MTU of the pod interface, up),
// installs the pod's nftables table (frames to the VM pass by the policy,
// which starts empty; none from it until OpenGate) and removes the pod
// interface's IPv4 addresses (the VM owns the IP now; the netns kernel
// must not answer ARP for it). On failure after the tap was created
// everything is rolled back with Detach.
func Attach(nsPath string, p Pod, tap string, opts ...Option) (err error) {
	o := collect(opts)
	n, err := dial(nsPath)
	if err != nil {
		return err
	}
	defer n.Close()
	if err := Run(nsPath, func() error { return createTap(tap, o) }); err != nil {
		return fmt.Errorf("create tap %s in netns %s: %w", tap, nsPath, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, Detach(nsPath, p, tap))
		}
	}()
	return n.attach(p, tap, o)
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (n *podNS) attach(p Pod, tap string, o options) error {
	pod, err := n.link(p.Interface)
	if err != nil {
		return err
	}
	mtu := p.MTU
	if mtu == 0 {
		mtu = pod.Attrs().MTU
	}
	tapLink, err := n.upTap(tap, mtu)
	if err != nil {
		return err
	}
	e, err := endsOf(p, pod, tapLink, o)
	if err != nil {
		return err
	}
	if err := n.installTable(e); err != nil {
		return err
	}
	if err := n.flushV4(pod); err != nil {
		return err
	}
	if !o.resolver.IsValid() {
		return nil
	}
	if err := n.addResolver(tapLink, e); err != nil {
		return err
	}
	return n.installLocalForward(e)
}

// endsOf is what the rules need of the pod and its tap.
func endsOf(p Pod, pod, tap netlink.Link, o options) (ends, error) {
	mac, err := net.ParseMAC(p.MAC)
	if err != nil {
		return ends{}, fmt.Errorf("pod MAC %q: %w", p.MAC, err)
	}
	prefix, err := netip.ParsePrefix(p.Address)
	if err != nil || !prefix.Addr().Is4() {
		return ends{}, fmt.Errorf("pod address %q: want an IPv4 CIDR", p.Address)
	}
	return ends{pod: pod.Attrs().Index, tap: tap.Attrs().Index, podName: pod.Attrs().Name, tapName: tap.Attrs().Name,
		mac: mac, ip: prefix.Addr(), resolver: o.resolver}, nil
}

// addResolver: the resolver's address on the tap, the pod IP routed to
// the tap from it, and the VM's MAC fixed (no ARP from the netns).
func (n *podNS) addResolver(tap netlink.Link, e ends) error {
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: e.resolver.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := n.h.AddrAdd(tap, addr); err != nil && !errors.Is(err, unix.EEXIST) {
		return n.errorf(err, "add resolver address %s to %s", e.resolver, e.tapName)
	}
	ip := e.ip.AsSlice()
	r := &netlink.Route{LinkIndex: e.tap, Dst: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK, Src: e.resolver.AsSlice()}
	if err := n.h.RouteReplace(r); err != nil {
		return n.errorf(err, "route %s to %s", e.ip, e.tapName)
	}
	neigh := &netlink.Neigh{LinkIndex: e.tap, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: ip, HardwareAddr: e.mac}
	if err := n.h.NeighSet(neigh); err != nil {
		return n.errorf(err, "fix neighbour %s on %s", e.ip, e.tapName)
	}
	return nil
}

func (n *podNS) upTap(tap string, mtu int) (netlink.Link, error) {
	l, err := n.link(tap)
	if err != nil {
		return nil, err
	}
	if err := n.h.LinkSetMTU(l, mtu); err != nil {
		return nil, n.errorf(err, "set MTU %d on %s", mtu, tap)
	}
	if err := n.h.LinkSetUp(l); err != nil {
		return nil, n.errorf(err, "set %s up", tap)
	}
	return l, nil
}

func (n *podNS) flushV4(link netlink.Link) error {
	addrs, err := dump(func() ([]netlink.Addr, error) { return n.h.AddrList(link, netlink.FAMILY_V4) })
	if err != nil {
		return n.errorf(err, "list IPv4 addresses of %s", link.Attrs().Name)
	}
	for _, a := range addrs {
		if err := n.h.AddrDel(link, &a); err != nil {
			return n.errorf(err, "remove %s from %s", a.IPNet, link.Attrs().Name)
		}
	}
	return nil
}

// OpenGate lets the VM's frames out (with the pod's MAC and IP only).
// Call it only after the guest took the pod's identity, with the options
// Attach had. Opening an open gate is a no-op.
func OpenGate(nsPath string, p Pod, tap string, opts ...Option) error {
	n, err := dial(nsPath)
	if err != nil {
		return err
	}
	defer n.Close()
	pod, err := n.link(p.Interface)
	if err != nil {
		return err
	}
	tapLink, err := n.link(tap)
	if err != nil {
		return err
	}
	e, err := endsOf(p, pod, tapLink, collect(opts))
	if err != nil {
		return err
	}
	return n.openGate(e)
}

// Detach undoes Attach/OpenGate and gives the pod interface its address and
// default route back (removing the last address made the kernel drop every
// route through it). A missing netns, tap or pod interface is not an error:
// the pod may already be gone, and teardown must be repeatable.
func Detach(nsPath string, p Pod, tap string) error {
	n, err := dial(nsPath)
	if errors.Is(err, errNSGone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer n.Close()
	pod, err := n.h.LinkByName(p.Interface)
	if isNotFound(err) {
		pod = nil
	} else if err != nil {
		return n.errorf(err, "find link %s", p.Interface)
	}
	// Stop pod→tap first so nothing is forwarded to a vanishing device
	// (the ingress qdisc: what a shim before the nftables table made).
	if err := n.deleteTable(); err != nil {
		return err
	}
	if pod != nil {
		if err := n.delIngress(pod); err != nil {
			return err
		}
	}
	if err := n.delTap(tap); err != nil {
		return err
	}
	if pod == nil {
		return nil
	}
	return n.restore(pod, p)
}

func (n *podNS) delTap(tap string) error {
	l, err := n.h.LinkByName(tap)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return n.errorf(err, "find link %s", tap)
	}
	if err := n.h.LinkDel(l); err != nil {
		return n.errorf(err, "delete tap %s", tap)
	}
	return nil
}

func (n *podNS) restore(pod netlink.Link, p Pod) error {
	name := pod.Attrs().Name
	if p.Address != "" {
		addr, err := netlink.ParseAddr(p.Address)
		if err != nil {
			return fmt.Errorf("parse pod address %q: %w", p.Address, err)
		}
		if err := n.h.AddrAdd(pod, addr); err != nil && !errors.Is(err, unix.EEXIST) {
			return n.errorf(err, "restore %s on %s", p.Address, name)
		}
	}
	if p.Gateway == "" {
		return nil
	}
	gw := net.ParseIP(p.Gateway)
	if gw == nil {
		return fmt.Errorf("parse pod gateway %q: not an IP", p.Gateway)
	}
	r := &netlink.Route{LinkIndex: pod.Attrs().Index, Gw: gw}
	if err := n.h.RouteReplace(r); err != nil {
		return n.errorf(err, "restore default route via %s on %s", p.Gateway, name)
	}
	return nil
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

package podnet

import (
	"errors"
	"fmt"
	"net"

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

// Option tunes Attach.
type Option func(*options)

type options struct {
	owner    bool
	uid, gid int
}

// WithOwner makes the tap openable by an unprivileged QEMU running as
// uid/gid; otherwise attaching to it needs CAP_NET_ADMIN.
func WithOwner(uid, gid int) Option {
	return func(o *options) { o.owner, o.uid, o.gid = true, uid, gid }
}

// Attach creates tap `tap` in the netns (MTU of the pod interface, up),
// installs ingress qdiscs on both, redirects everything arriving on the pod
// interface to the tap and removes the pod interface's IPv4 addresses (the VM
// owns the IP now; the netns kernel must not answer ARP for it). The
// tap→pod direction stays closed until OpenGate. On failure after the tap was
// created everything is rolled back with Detach.
func Attach(nsPath string, p Pod, tap string, opts ...Option) (err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
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
	return n.attach(p, tap)
}

func (n *podNS) attach(p Pod, tap string) error {
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
	for _, l := range []netlink.Link{pod, tapLink} {
		if err := n.addIngress(l); err != nil {
			return err
		}
	}
	if err := n.redirect(pod, tapLink); err != nil {
		return err
	}
	return n.flushV4(pod)
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

// OpenGate installs the tap→pod redirect. Call it only after the guest took
// the pod's MAC and IP, so no frame with a template identity reaches the
// bridge. Opening an open gate is a no-op.
func OpenGate(nsPath string, p Pod, tap string) error {
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
	return n.redirect(tapLink, pod)
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
	// Stop pod→tap first so nothing is mirrored to a vanishing device.
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

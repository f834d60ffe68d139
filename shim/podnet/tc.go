package podnet

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ingressParent is the parent of filters attached to an ingress qdisc ("ffff:").
var ingressParent = netlink.MakeHandle(0xffff, 0)

// kernelHint turns the kernel's ENOENT for an unknown qdisc, classifier or
// action into something an operator can act on.
func kernelHint(err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w (kernel lacks tc support? needs CONFIG_NET_SCH_INGRESS, CONFIG_NET_CLS_U32, CONFIG_NET_CLS_ACT and CONFIG_NET_ACT_MIRRED)", err)
	}
	return err
}

func ingressQdisc(link netlink.Link) *netlink.Ingress {
	return &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: link.Attrs().Index,
		Handle:    ingressParent,
		Parent:    netlink.HANDLE_INGRESS,
	}}
}

func (n *podNS) addIngress(link netlink.Link) error {
	err := n.h.QdiscAdd(ingressQdisc(link))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return n.errorf(kernelHint(err), "add ingress qdisc on %s", link.Attrs().Name)
	}
	return nil
}

// delIngress removes the ingress qdisc, which takes its filters with it.
func (n *podNS) delIngress(link netlink.Link) error {
	err := n.h.QdiscDel(ingressQdisc(link))
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return n.errorf(err, "delete ingress qdisc on %s", link.Attrs().Name)
	}
	return nil
}

// redirect sends every frame arriving on from out of to, as Kata's
// setupTCFiltering does: u32 with one all-zero key matches everything
// (matchall is not built on the target kernel) and mirred steals the frame.
// An existing redirect to the same device makes this a no-op.
func (n *podNS) redirect(from, to netlink.Link) error {
	if ok, err := n.hasRedirect(from, to); ok || err != nil {
		return err
	}
	f := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: from.Attrs().Index,
			Parent:    ingressParent,
			Protocol:  unix.ETH_P_ALL,
		},
		Sel: &netlink.TcU32Sel{
			Flags: netlink.TC_U32_TERMINAL,
			Keys:  []netlink.TcU32Key{{Mask: 0, Val: 0}},
		},
		Actions: []netlink.Action{netlink.NewMirredAction(to.Attrs().Index)},
	}
	if err := n.h.FilterAdd(f); err != nil {
		return n.errorf(kernelHint(err), "add %s→%s mirred filter", from.Attrs().Name, to.Attrs().Name)
	}
	return nil
}

func (n *podNS) hasRedirect(from, to netlink.Link) (bool, error) {
	filters, err := n.redirects(from)
	if err != nil {
		return false, err
	}
	for _, m := range filters {
		if m.Ifindex == to.Attrs().Index {
			return true, nil
		}
	}
	return false, nil
}

// redirects lists the mirred actions of the u32 filters on link's ingress.
func (n *podNS) redirects(link netlink.Link) ([]*netlink.MirredAction, error) {
	filters, err := dump(func() ([]netlink.Filter, error) { return n.h.FilterList(link, ingressParent) })
	if err != nil {
		return nil, n.errorf(err, "list ingress filters of %s", link.Attrs().Name)
	}
	var out []*netlink.MirredAction
	for _, f := range filters {
		u, ok := f.(*netlink.U32)
		if !ok {
			continue
		}
		for _, a := range u.Actions {
			if m, ok := a.(*netlink.MirredAction); ok {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

package podnet

import (
	"errors"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A shim before the nftables table mirrored frames with tc (an ingress
// qdisc with u32 + mirred on the pod interface): Detach still removes that
// qdisc, so a pod attached by it is torn down cleanly after an upgrade.

// ingressParent is the parent of filters attached to an ingress qdisc ("ffff:").
var ingressParent = netlink.MakeHandle(0xffff, 0)

func ingressQdisc(link netlink.Link) *netlink.Ingress {
	return &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: link.Attrs().Index,
		Handle:    ingressParent,
		Parent:    netlink.HANDLE_INGRESS,
	}}
}

// delIngress removes the ingress qdisc, which takes its filters with it.
func (n *podNS) delIngress(link netlink.Link) error {
	err := n.h.QdiscDel(ingressQdisc(link))
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return n.errorf(err, "delete ingress qdisc on %s", link.Attrs().Name)
	}
	return nil
}

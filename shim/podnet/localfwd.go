package podnet

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Port-forwarding to the VM. The CRI's PortForward (kubectl port-forward)
// dials 127.0.0.1:PORT inside the pod's netns, where nothing answers: the
// VM owns the pod IP. With a resolver address on the tap the netns can
// reach the VM (addResolver), so it translates: TCP to 127.0.0.1 leaves
// for the pod IP, same port, from the resolver address, and the VM's
// replies come back through the gate (replyToHost). Only the netns's own
// sockets (the container runtime's port-forward) are translated: the
// output hook sees nothing the VM or the pod interface sends.
const (
	natTable       = "sandlot_localfwd"
	chainNATOut    = "output"
	chainNATSource = "postrouting"
	chainNATPre    = "prerouting"
	// tcpFlags is the TCP header's flags byte; SYN without ACK opens a
	// connection.
	tcpFlags = 13
	flagSYN  = 0x02
	flagACK  = 0x10
)

var loopback = netip.MustParseAddr("127.0.0.1")

// installLocalForward sets route_localnet (a packet from 127.0.0.1 may
// leave by the tap once translated, and its replies come back to it) and
// the netns's NAT table.
func (n *podNS) installLocalForward(e ends) error {
	if err := Run(n.path, func() error {
		// /proc/sys/net is the opener's netns: this thread's, here.
		return os.WriteFile("/proc/sys/net/ipv4/conf/all/route_localnet", []byte("1"), 0)
	}); err != nil {
		return fmt.Errorf("set route_localnet in netns %s: %w", n.path, err)
	}
	conn, err := n.nft()
	if err != nil {
		return err
	}
	if err := n.deleteNamed(conn, nftables.TableFamilyIPv4, natTable); err != nil {
		return err
	}
	t := conn.AddTable(&nftables.Table{Name: natTable, Family: nftables.TableFamilyIPv4})
	out := conn.AddChain(&nftables.Chain{Name: chainNATOut, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	post := conn.AddChain(&nftables.Chain{Name: chainNATSource, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	conn.AddRule(&nftables.Rule{Table: t, Chain: out,
		Exprs: cat(ipField(ipDst, loopback, true), l4proto(unix.IPPROTO_TCP), natTo(expr.NATTypeDestNAT, e.ip))})
	conn.AddRule(&nftables.Rule{Table: t, Chain: post,
		Exprs: cat(outInterface(e.tap), ipField(ipSrc, loopback, true), natTo(expr.NATTypeSourceNAT, e.resolver))})
	// The VM's TCP the filter sends here (Policy.Tunnel) goes to the
	// tunnel: any destination but the resolver's own address.
	pre := conn.AddChain(&nftables.Chain{Name: chainNATPre, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	conn.AddRule(&nftables.Rule{Table: t, Chain: pre,
		Exprs: cat(inInterface(e.tap), l4proto(unix.IPPROTO_TCP), ipField(ipDst, e.resolver, false), redirectTo(TunnelPort))})
	if err := conn.Flush(); err != nil {
		return n.errorf(err, "install the port-forward NAT (the kernel needs CONFIG_NFT_NAT)")
	}
	return nil
}

// replyToHost: the VM's TCP to the resolver address reaches this netns's
// stack unless it opens a connection (SYN without ACK): the replies of
// port-forwarded connections pass, a connection the VM starts does not.
func replyToHost(resolver netip.Addr) []expr.Any {
	return cat(ipField(ipDst, resolver, true), l4proto(unix.IPPROTO_TCP),
		one(load(expr.PayloadBaseTransportHeader, tcpFlags, 1, reg1),
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{flagSYN | flagACK}, Xor: []byte{0}},
			neq(reg1, []byte{flagSYN})), toHost())
}

func outInterface(ifindex int) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyOIF, Register: reg1}, eq(reg1, ifindexData(ifindex))}
}

// natTo translates the address (not the port) to a.
func natTo(t expr.NATType, a netip.Addr) []expr.Any {
	b := a.As4()
	return []expr.Any{&expr.Immediate{Register: reg1, Data: b[:]},
		&expr.NAT{Type: t, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1}}
}

func inInterface(ifindex int) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyIIF, Register: reg1}, eq(reg1, ifindexData(ifindex))}
}

// redirectTo sends the packet to this host's address on its interface,
// port p (conntrack keeps the original destination for the listener).
func redirectTo(p uint16) []expr.Any {
	return []expr.Any{&expr.Immediate{Register: reg1, Data: binaryutil.BigEndian.PutUint16(p)},
		&expr.Redir{RegisterProtoMin: reg1}}
}

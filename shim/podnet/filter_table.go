package podnet

import (
	"errors"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// ends names what the rules need of a pod: its two devices, the VM's
// identity (the pod's MAC and IP) and the resolver's address (invalid:
// none).
type ends struct {
	pod, tap int // ifindex in the pod netns
	tapName  string
	podName  string
	mac      net.HardwareAddr
	ip       netip.Addr
	resolver netip.Addr
}

// layout is a pod table's sets and chains.
type layout struct {
	t                          *nftables.Table
	sets                       map[string]*nftables.Set
	fromVM, toVM, arp, out, in *nftables.Chain
}

func filterTable() *nftables.Table {
	return &nftables.Table{Name: tableName, Family: nftables.TableFamilyNetdev}
}

func newLayout(conn *nftables.Conn, e ends) (*layout, error) {
	t := conn.AddTable(filterTable())
	l := &layout{t: t, sets: map[string]*nftables.Set{}}
	flowKey := nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeInetService)
	for _, s := range []*nftables.Set{
		{Name: setBlocked, KeyType: nftables.TypeIPAddr, Interval: true},
		{Name: setPlatform, KeyType: nftables.TypeIPAddr, Interval: true},
		{Name: setOpenable, KeyType: nftables.TypeIPAddr, Interval: true},
		{Name: setAllow, KeyType: nftables.TypeIPAddr, Interval: true},
		{Name: setDeny, KeyType: nftables.TypeIPAddr, Interval: true},
		{Name: setIngress, KeyType: nftables.TypeIPAddr, Interval: true},
		{Name: setTunnel, KeyType: nftables.TypeIPAddr, Interval: true},
		// Bounded: a guest resolving endless names of an allowed wildcard
		// fills only its own table (further answers open nothing).
		{Name: setLearned, KeyType: nftables.TypeIPAddr, HasTimeout: true, Size: maxLearned},
		{Name: setFlows, KeyType: flowKey, Concatenation: true, HasTimeout: true, Dynamic: true, Size: maxFlows},
	} {
		s.Table = t
		if err := conn.AddSet(s, nil); err != nil {
			return nil, err
		}
		l.sets[s.Name] = s
	}
	drop := nftables.ChainPolicyDrop
	base := func(name, dev string) *nftables.Chain {
		return conn.AddChain(&nftables.Chain{Name: name, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookIngress, Priority: nftables.ChainPriorityFilter, Device: dev, Policy: &drop})
	}
	l.fromVM, l.toVM = base(chainFromVM, e.tapName), base(chainToVM, e.podName)
	l.arp = conn.AddChain(&nftables.Chain{Name: chainVMARP, Table: t})
	l.out = conn.AddChain(&nftables.Chain{Name: chainVMOut, Table: t})
	l.in = conn.AddChain(&nftables.Chain{Name: chainVMIn, Table: t})
	return l, nil
}

func (l *layout) add(conn *nftables.Conn, c *nftables.Chain, rules ...[]expr.Any) {
	for _, r := range rules {
		conn.AddRule(&nftables.Rule{Table: l.t, Chain: c, Exprs: r})
	}
}

// addToVM: frames for the VM. ARP passes (the host resolves the pod IP);
// IPv4 to the pod IP passes when it belongs to a tracked flow, is an ICMP
// reply or error, or comes from whom the ingress set admits (which opens
// a flow); everything else is dropped.
func (l *layout) addToVM(conn *nftables.Conn, e ends) {
	fwd := forward(e.tap)
	flows := l.sets[setFlows]
	l.add(conn, l.toVM,
		cat(etherType(unix.ETH_P_ARP, true), fwd),
		cat(etherType(unix.ETH_P_IP, false), one(verdict(expr.VerdictDrop))),
		cat(ipField(ipDst, e.ip, false), one(verdict(expr.VerdictDrop))),
		cat(l4proto(unix.IPPROTO_TCP), flowKey(false), one(lookupFlow(flows), updateFlow(flows, tcpFlowIdle)), fwd),
		cat(l4proto(unix.IPPROTO_UDP), flowKey(false), one(lookupFlow(flows), updateFlow(flows, udpFlowIdle)), fwd),
	)
	for _, typ := range []byte{0, 3, 11, 12} { // echo reply, unreachable, time exceeded, parameter problem
		l.add(conn, l.toVM, cat(l4proto(unix.IPPROTO_ICMP),
			one(load(expr.PayloadBaseTransportHeader, icmpTypeAt, 1, reg1), eq(reg1, []byte{typ})), fwd))
	}
	l.add(conn, l.toVM,
		cat(inSet(ipSrc, l.sets[setIngress]), one(goTo(chainVMIn))),
		// Later fragments carry no ports: they pass, and the VM keeps
		// them only if the first fragment was let in.
		cat(one(load(expr.PayloadBaseNetworkHeader, ipFragOff, 2, reg1),
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 2, Mask: []byte{0x1f, 0xff}, Xor: []byte{0, 0}},
			neq(reg1, []byte{0, 0})), fwd),
	)
	l.add(conn, l.in,
		cat(l4proto(unix.IPPROTO_TCP), flowKey(false), one(updateFlow(flows, tcpFlowIdle)), fwd),
		cat(l4proto(unix.IPPROTO_UDP), flowKey(false), one(updateFlow(flows, udpFlowIdle)), fwd),
		fwd,
	)
}

// addFromVM opens the gate: frames from the VM leave only with its own
// MAC and IP; DNS to the resolver goes to this netns's forwarder, NFS to
// the resolver's address to the volume server (filter.go VolumePort), HTTP and
// HTTPS there to the egress proxy, and so
// do replies to port-forwarded connections (localfwd.go); a
// tracked flow passes; a new connection is refused to the node itself
// and to the platform's denials (whatever the sandbox's rules or its
// resolver's answers say) unless allowOut or a learned domain names an
// address of a range the operator made openable; it passes to what
// allowOut or a learned domain names, is refused to what the sandbox's
// deny set holds, and passes otherwise (opening a flow).
func (l *layout) addFromVM(conn *nftables.Conn, e ends) {
	fwd := forward(e.pod)
	flows := l.sets[setFlows]
	drop := one(verdict(expr.VerdictDrop))
	l.add(conn, l.fromVM,
		cat(one(load(expr.PayloadBaseLLHeader, ethSrc, 6, reg1), neq(reg1, e.mac)), drop),
		cat(etherType(unix.ETH_P_ARP, true), one(jump(chainVMARP))),
		cat(etherType(unix.ETH_P_IP, false), drop),
		cat(ipField(ipSrc, e.ip, false), drop),
	)
	if e.resolver.IsValid() {
		dport := []byte{0, DNSPort}
		l.add(conn, l.fromVM, cat(ipField(ipDst, e.resolver, true),
			one(load(expr.PayloadBaseTransportHeader, thDstPort, 2, reg1), eq(reg1, dport)), toHost()))
		for _, p := range []uint16{VolumePort, EgressHTTPPort, EgressTLSPort} {
			l.add(conn, l.fromVM, cat(ipField(ipDst, e.resolver, true), l4proto(unix.IPPROTO_TCP),
				one(load(expr.PayloadBaseTransportHeader, thDstPort, 2, reg1), eq(reg1, []byte{byte(p >> 8), byte(p)})), toHost()))
		}
		l.add(conn, l.fromVM, replyToHost(e.resolver))
	}
	l.add(conn, l.fromVM,
		cat(l4proto(unix.IPPROTO_TCP), flowKey(true), one(lookupFlow(flows), updateFlow(flows, tcpFlowIdle)), fwd))
	if e.resolver.IsValid() {
		// With an egress proxy the VM's other TCP (not a tracked flow:
		// not a reply to a connection into the VM) goes to the netns,
		// whose NAT hands it to the tunnel (localfwd.go), which checks
		// the policy below itself.
		l.add(conn, l.fromVM, cat(l4proto(unix.IPPROTO_TCP), inSet(ipDst, l.sets[setTunnel]), toHost()))
	}
	l.add(conn, l.fromVM,
		cat(l4proto(unix.IPPROTO_UDP), flowKey(true), one(lookupFlow(flows), updateFlow(flows, udpFlowIdle)), fwd),
		cat(inSet(ipDst, l.sets[setBlocked]), l4proto(unix.IPPROTO_TCP), one(rejectTCP())),
		cat(inSet(ipDst, l.sets[setBlocked]), one(rejectOther())),
		cat(inSet(ipDst, l.sets[setOpenable]), inSet(ipDst, l.sets[setAllow]), one(goTo(chainVMOut))),
		cat(inSet(ipDst, l.sets[setOpenable]), inSet(ipDst, l.sets[setLearned]), one(goTo(chainVMOut))),
		cat(inSet(ipDst, l.sets[setPlatform]), l4proto(unix.IPPROTO_TCP), one(rejectTCP())),
		cat(inSet(ipDst, l.sets[setPlatform]), one(rejectOther())),
		cat(inSet(ipDst, l.sets[setAllow]), one(goTo(chainVMOut))),
		cat(inSet(ipDst, l.sets[setLearned]), one(goTo(chainVMOut))),
		cat(inSet(ipDst, l.sets[setDeny]), l4proto(unix.IPPROTO_TCP), one(rejectTCP())),
		cat(inSet(ipDst, l.sets[setDeny]), one(rejectOther())),
		one(goTo(chainVMOut)),
	)
	spa := e.ip.As4()
	l.add(conn, l.arp,
		cat(one(load(expr.PayloadBaseNetworkHeader, arpSHA, 6, reg1), neq(reg1, e.mac)), drop),
		cat(one(load(expr.PayloadBaseNetworkHeader, arpSPA, 4, reg1), neq(reg1, spa[:])), drop),
		fwd,
	)
	l.add(conn, l.out,
		cat(l4proto(unix.IPPROTO_TCP), flowKey(true), one(updateFlow(flows, tcpFlowIdle)), fwd),
		cat(l4proto(unix.IPPROTO_UDP), flowKey(true), one(updateFlow(flows, udpFlowIdle)), fwd),
		fwd, // ICMP, later fragments
	)
}

// installTable replaces the pod's table with one whose to_vm side runs
// and whose gate (from_vm, drop policy, no rules yet) is closed.
func (n *podNS) installTable(e ends) error {
	conn, err := n.nft()
	if err != nil {
		return err
	}
	if err := n.deleteTable(); err != nil {
		return err
	}
	l, err := newLayout(conn, e)
	if err != nil {
		return n.errorf(err, "lay out the nftables table")
	}
	l.addToVM(conn, e)
	if err := conn.Flush(); err != nil {
		return n.errorf(err, "install the nftables table (the kernel needs CONFIG_NF_TABLES_NETDEV, NFT_DUP_NETDEV and NFT_REJECT_NETDEV)")
	}
	return nil
}

// openGate adds the from_vm rules (once: an open gate has rules).
func (n *podNS) openGate(e ends) error {
	conn, err := n.nft()
	if err != nil {
		return err
	}
	rules, err := conn.GetRules(filterTable(), &nftables.Chain{Name: chainFromVM})
	if err != nil {
		return n.errorf(err, "list the gate's rules")
	}
	if len(rules) > 0 {
		return nil
	}
	l := &layout{t: filterTable(), sets: map[string]*nftables.Set{}}
	for _, name := range []string{setBlocked, setPlatform, setOpenable, setAllow, setDeny, setLearned, setTunnel, setFlows} {
		if l.sets[name], err = conn.GetSetByName(l.t, name); err != nil {
			return n.errorf(err, "find set %s", name)
		}
	}
	for _, c := range []struct {
		p    **nftables.Chain
		name string
	}{{&l.fromVM, chainFromVM}, {&l.arp, chainVMARP}, {&l.out, chainVMOut}} {
		*c.p = &nftables.Chain{Name: c.name, Table: l.t}
	}
	l.addFromVM(conn, e)
	if err := conn.Flush(); err != nil {
		return n.errorf(err, "open the gate")
	}
	return nil
}

func (n *podNS) nft() (*nftables.Conn, error) {
	conn, err := nftables.New(nftables.WithNetNSFd(int(n.ns)))
	if err != nil {
		return nil, n.errorf(err, "nftables")
	}
	return conn, nil
}

// deleteTable removes the pod's tables (the filter and the port-forward
// NAT); an absent one is not an error.
func (n *podNS) deleteTable() error {
	conn, err := n.nft()
	if err != nil {
		return err
	}
	if err := n.deleteNamed(conn, nftables.TableFamilyNetdev, tableName); err != nil {
		return err
	}
	return n.deleteNamed(conn, nftables.TableFamilyIPv4, natTable)
}

// deleteNamed removes the table of that family and name, if there is one.
func (n *podNS) deleteNamed(conn *nftables.Conn, family nftables.TableFamily, name string) error {
	tables, err := conn.ListTablesOfFamily(family)
	if err != nil {
		return n.errorf(err, "list nftables tables")
	}
	for _, t := range tables {
		if t.Name == name {
			conn.DelTable(t)
			if err := conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
				return n.errorf(err, "delete nftables table %s", name)
			}
		}
	}
	return nil
}

package podnet

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
)

// The pod's traffic between its interface and the VM's tap goes through
// one netdev table, in place of tc mirred: ingress hooks on both devices
// filter and forward. netdev has no conntrack, so flows are tracked in a
// timeout set keyed remote address . protocol . remote port . local port:
// the first packet of an allowed connection (either way) adds it, every
// packet refreshes it, a reply passes only if its key is there.
const (
	tableName   = "sandlot"
	chainFromVM = "from_vm"
	chainToVM   = "to_vm"
	chainVMARP  = "vm_arp"
	chainVMOut  = "vm_out"
	chainVMIn   = "vm_in"

	setBlocked  = "blocked"  // the node's own addresses: no rule opens them
	setPlatform = "platform" // the operator's denials: only inside openable
	setOpenable = "openable" // ranges of platform an allow or learned address opens
	setAllow    = "allow"    // allowOut CIDRs: beat the deny set
	setDeny     = "deny"     // the sandbox's denyOut
	setLearned  = "learned"  // addresses of allowed domains, for their TTL
	setIngress  = "ingress"  // who may open connections to the VM
	setTunnel   = "tunnel"   // TCP to these goes to the netns's tunnel (an egress proxy)
	setFlows    = "flows"

	// Idle timeouts of tracked flows, and the table's bound on them
	// (a VM that opens more only fails its own new connections).
	tcpFlowIdle = time.Hour
	udpFlowIdle = 2 * time.Minute
	maxFlows    = 65536
	maxLearned  = 16384
)

// DNSPort is where the VM's resolver listens.
const DNSPort = 53

// VolumePort is where the shim's NFS server for the sandbox's volumes
// listens (TCP, on the resolver's address; MOUNT and NFS on one port).
// A pod without volumes has no listener there: the netns resets.
const VolumePort = 2049

// TunnelPort is where the VM's TCP goes with Policy.Tunnel (redirected
// by the netns's NAT to the resolver's address; the listener reads the
// original destination).
const TunnelPort = 15001

// EgressHTTPPort and EgressTLSPort are where the shim's egress proxy
// listens on the resolver's address: the VM's resolver answers the
// domains of the sandbox's header rules with that address.
const (
	EgressHTTPPort = 80
	EgressTLSPort  = 443
)

// Policy is what a pod's filter enforces beyond anti-spoofing and the
// flows its VM opened: set live by Update.
type Policy struct {
	Blocked     []netip.Prefix // never opened (the node itself)
	Platform    []netip.Prefix // opened only inside Openable, by AllowOut or a learned address
	Openable    []netip.Prefix
	AllowOut    []netip.Prefix // beats DenyOut
	DenyOut     []netip.Prefix
	IngressFrom []netip.Prefix // may open connections to the VM
	Ingress     bool           // anyone may
	// Tunnel sends all the VM's TCP to the pod netns's TunnelPort (the
	// shim's SOCKS5 tunnel), which checks this policy itself
	// (Permits): the sandbox's egressProxy.
	Tunnel bool
}

// Filter is an open handle on a pod's table, for live updates.
type Filter struct {
	mu   sync.Mutex // a Conn batches: one batch at a time
	conn *nftables.Conn
	ns   netns.NsHandle
	sets map[string]*nftables.Set
}

var errNoTable = errors.New("no sandlot nftables table in the pod netns (not attached?)")

// OpenFilter opens the table Attach made in the netns at nsPath.
func OpenFilter(nsPath string) (*Filter, error) {
	h, err := openNS(nsPath)
	if err != nil {
		return nil, err
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(h)), nftables.AsLasting())
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("nftables in netns %s: %w", nsPath, err)
	}
	f := &Filter{conn: conn, ns: h, sets: map[string]*nftables.Set{}}
	t := &nftables.Table{Name: tableName, Family: nftables.TableFamilyNetdev}
	for _, name := range []string{setBlocked, setPlatform, setOpenable, setAllow, setDeny, setLearned, setIngress, setTunnel, setFlows} {
		s, err := conn.GetSetByName(t, name)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: set %s: %v", errNoTable, name, err)
		}
		f.sets[name] = s
	}
	return f, nil
}

// Close releases the handle (the table stays).
func (f *Filter) Close() error {
	err := f.conn.CloseLasting()
	f.ns.Close()
	return err
}

// Update replaces the policy's sets in one atomic batch; flows already
// open stay open (as with conntrack), new ones see the new policy.
func (f *Filter) Update(p Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ingress := p.IngressFrom
	if p.Ingress {
		ingress = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	}
	var tunnel []netip.Prefix
	if p.Tunnel {
		tunnel = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	}
	for name, prefixes := range map[string][]netip.Prefix{setBlocked: p.Blocked, setPlatform: p.Platform,
		setOpenable: p.Openable, setAllow: p.AllowOut, setDeny: p.DenyOut, setIngress: ingress, setTunnel: tunnel} {
		s := f.sets[name]
		f.conn.FlushSet(s)
		if els := intervalElements(prefixes); len(els) > 0 {
			if err := f.conn.SetAddElements(s, els); err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
		}
	}
	if err := f.conn.Flush(); err != nil {
		return fmt.Errorf("update the pod's nftables policy: %w", err)
	}
	return nil
}

// Learn opens addrs for ttl (a resolver answer for an allowed domain).
// Add, delete, add in one batch: the element exists whatever it was,
// and takes the new timeout (an add alone keeps an old, shorter one).
func (f *Filter) Learn(addrs []netip.Addr, ttl time.Duration) error {
	var els []nftables.SetElement
	for _, a := range addrs {
		if a.Is4() {
			b := a.As4()
			els = append(els, nftables.SetElement{Key: b[:], Timeout: ttl})
		}
	}
	if len(els) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sets[setLearned]
	for _, step := range []func(*nftables.Set, []nftables.SetElement) error{
		f.conn.SetAddElements, f.conn.SetDeleteElements, f.conn.SetAddElements} {
		if err := step(s, els); err != nil {
			return fmt.Errorf("learn %v: %w", addrs, err)
		}
	}
	if err := f.conn.Flush(); err != nil {
		return fmt.Errorf("learn %v: %w", addrs, err)
	}
	return nil
}

package shim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandlot-dev/sandlot/api/node"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/shim/dnsfwd"
	"github.com/sandlot-dev/sandlot/shim/egress"
	"github.com/sandlot-dev/sandlot/shim/podnet"
)

// resolverAddr is the VM's resolver: the shim's forwarder, on the tap in
// the pod's netns. Link-local, so it is the same in every pod and no
// pod or service range collides with it.
var resolverAddr = netip.MustParseAddr("169.254.53.53")

// netGuard enforces a pod's traffic policy: the node's defaults with the
// sandbox's rules, changed live.
type netGuard interface {
	// Apply sets the sandbox's rules; ingress adds who may open
	// connections to it (sandlot-api's pods).
	Apply(n *sandlotv1.SandboxNetwork, ingress []netip.Prefix) error
	// EgressCA is the PEM certificate the guest trusts for the header
	// rules' HTTPS (nil: no egress proxy).
	EgressCA() []byte
	Close() error
}

// guardSpec is what a pod's guard starts from.
type guardSpec struct {
	Defaults node.NetworkConfig
	DNS      dnsConfig
	Gateway  string
	Network  *sandlotv1.SandboxNetwork
	Volumes  []podVolume
	// Name labels the pod's egress CA; EgressSecrets is the host
	// directory of the header rules' Secret ("" without one).
	Name          string
	EgressSecrets string
}

// dnsConfig is the pod's resolv.conf (CRI's DNSConfig, as containerd
// wrote it for the pod).
type dnsConfig struct {
	Servers, Search, Options []string
}

// resolvConfOf reads the resolv.conf the container's spec mounts ("" and
// no error when it mounts none: the VM then has no resolver upstream).
func resolvConfOf(spec *specs.Spec) (dnsConfig, error) {
	for _, m := range spec.Mounts {
		if m.Destination != "/etc/resolv.conf" {
			continue
		}
		cc, err := dns.ClientConfigFromFile(m.Source)
		if err != nil {
			return dnsConfig{}, fmt.Errorf("read the pod's resolv.conf %s: %w", m.Source, err)
		}
		d := dnsConfig{Search: cc.Search}
		for _, s := range cc.Servers {
			d.Servers = append(d.Servers, net.JoinHostPort(s, cc.Port))
		}
		if cc.Ndots != 1 {
			d.Options = append(d.Options, fmt.Sprintf("ndots:%d", cc.Ndots))
		}
		return d, nil
	}
	return dnsConfig{}, nil
}

// guard is the real netGuard: the pod's nftables filter and its DNS
// forwarder.
type guard struct {
	filter *podnet.Filter
	fwd    *dnsfwd.Forwarder
	base   podnet.Policy
	// resolvable are the names the operator lets a closed sandbox's
	// resolver answer (the node's network.resolveWhenClosed).
	resolvable dnsfwd.Matcher
	closers    []func() error
	// proxy applies the header rules (nil without a resolver), with the
	// values read from secretsDir; state is what its dials are checked
	// against.
	proxy      *egress.Proxy
	secretsDir string
	state      atomic.Pointer[egressState]
	names      learnedNames
}

// startGuard opens the filter Attach made, serves the resolver in the
// pod's netns and applies the policy. The resolver first: Apply gives it
// the sandbox's names, and one started after would answer (and forward)
// every name until the next Apply — a DNS tunnel out of a sandbox whose
// egress is closed, and allowed names not learned.
func startGuard(netns string, g guardSpec) (*guard, error) {
	base, err := basePolicy(g)
	if err != nil {
		return nil, err
	}
	f, err := podnet.OpenFilter(netns)
	if err != nil {
		return nil, err
	}
	gd := &guard{filter: f, base: base, closers: []func() error{f.Close},
		resolvable: sandlotv1.NetworkRules{AllowDomains: g.Defaults.ResolveWhenClosed}.MatchDomain}
	if len(g.DNS.Servers) > 0 {
		if err := gd.serveDNS(netns, g.DNS.Servers); err != nil {
			return nil, errors.Join(err, gd.Close())
		}
		if err := gd.serveEgress(netns, g.Name, g); err != nil {
			return nil, errors.Join(err, gd.Close())
		}
	}
	if len(g.Volumes) > 0 {
		if err := gd.serveVolumes(netns, g.Volumes); err != nil {
			return nil, errors.Join(err, gd.Close())
		}
	}
	if err := gd.Apply(g.Network, nil); err != nil && !errors.Is(err, egress.ErrMissingSecret) {
		// A key the kubelet has not delivered yet is not fatal: the
		// rule refuses its requests until the agent's push reads it.
		return nil, errors.Join(err, gd.Close())
	}
	return gd, nil
}

// basePolicy: the platform's denials and what of them allowOut may
// open, the node's own addresses blocked; the node, the pod's gateway and
// the configured ranges admitted.
func basePolicy(g guardSpec) (podnet.Policy, error) {
	ingress, err := g.Defaults.Ingress()
	if err != nil {
		return podnet.Policy{}, err
	}
	egress, err := g.Defaults.Egress()
	if err != nil {
		return podnet.Policy{}, err
	}
	local, err := nodeAddrs()
	if err != nil {
		return podnet.Policy{}, err
	}
	if gw, err := netip.ParseAddr(g.Gateway); err == nil && gw.Is4() {
		local = append(local, netip.PrefixFrom(gw, 32))
	}
	// The node's own addresses (kubelet, agent, the pod's gateway) are
	// blocked, not only denied: no sandbox's allowOut opens them.
	return podnet.Policy{Blocked: local, Platform: egress.Deny, Openable: egress.Open,
		IngressFrom: append(ingress, local...), Ingress: g.Defaults.IngressOpen}, nil
}

// nodeAddrs are the node's IPv4 addresses (the shim runs in its netns).
func nodeAddrs() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP.To4()); ok && ipn.IP.To4() != nil {
				out = append(out, netip.PrefixFrom(ip, 32))
			}
		}
	}
	return out, nil
}

// Apply sets the sandbox's rules on top of the node's (nil: none).
func (g *guard) Apply(n *sandlotv1.SandboxNetwork, ingress []netip.Prefix) error {
	rules, err := sandlotv1.ParseNetwork(n)
	if err != nil {
		return err
	}
	p := g.base
	p.IngressFrom = append(append([]netip.Prefix{}, p.IngressFrom...), ingress...)
	p.AllowOut = rules.AllowCIDRs
	p.DenyOut = rules.DenyCIDRs
	p.Ingress = p.Ingress || rules.Ingress
	// With an egress proxy all TCP goes to the tunnel (which needs the
	// proxy; without one the rules' tunnel is refused below).
	p.Tunnel = rules.Proxy != nil && g.proxy != nil
	if g.fwd != nil {
		// With egress closed, names allowOut does not match are not
		// even asked upstream: a query is a message out (a DNS tunnel).
		g.fwd.SetMatcher(rules.MatchDomain, rules.EgressClosed(), g.resolvable)
	}
	if err := g.filter.Update(p); err != nil {
		return err
	}
	g.state.Store(&egressState{policy: p, rules: rules})
	return g.applyEgress(rules, n)
}

// serveDNS listens on the resolver address inside the netns (sockets
// keep the netns they were made in) and forwards from the node's.
func (g *guard) serveDNS(netns string, upstreams []string) error {
	var pc net.PacketConn
	var l net.Listener
	addr := net.JoinHostPort(resolverAddr.String(), fmt.Sprint(podnet.DNSPort))
	err := podnet.Run(netns, func() (err error) {
		if pc, err = net.ListenPacket("udp4", addr); err != nil {
			return err
		}
		if l, err = net.Listen("tcp4", addr); err != nil {
			pc.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("listen for the VM's DNS on %s: %w", addr, err)
	}
	fwd, err := dnsfwd.New(dnsfwd.Config{Upstreams: upstreams, Learner: learner{g.filter, &g.names}})
	if err != nil {
		pc.Close()
		l.Close()
		return fmt.Errorf("the VM's resolver: %w", err)
	}
	g.fwd = fwd
	g.closers = append([]func() error{fwd.Close}, g.closers...)
	go func() { _ = fwd.ServePacket(pc) }()
	go func() { _ = fwd.ServeListener(l) }()
	return nil
}

// Close stops the resolver and releases the filter (the table goes with
// Detach).
func (g *guard) Close() error {
	var errs []error
	for _, c := range g.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// learner opens what the resolver answered for an allowed name, and
// remembers the name (the egress tunnel asks its proxy for it by name).
type learner struct {
	f     *podnet.Filter
	names *learnedNames
}

func (l learner) Learn(name string, addrs []netip.Addr, ttl time.Duration) {
	l.names.add(name, addrs, ttl)
	if err := l.f.Learn(addrs, ttl); err != nil {
		logf(context.Background(), "learn %v for %v: %v", addrs, ttl, err)
	}
}

// guestDNS is what the guest's /etc/resolv.conf says: the forwarder,
// with the pod's search domains and options (nil: no resolver).
func guestDNS(d dnsConfig) *identity.DNS {
	if len(d.Servers) == 0 {
		return nil
	}
	return &identity.DNS{Nameservers: []string{resolverAddr.String()}, Search: d.Search, Options: d.Options}
}

package dnsfwd

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// InterceptTTL is the TTL of an intercepted answer: short, so a rule
// removed stops sending the VM to the proxy soon.
const InterceptTTL = 5

// intercept is which names answer with the egress proxy's address.
type intercept struct {
	match Matcher
	addr  netip.Addr
}

// SetIntercept has names m matches answered with addr (the sandbox's
// egress proxy, which applies the header rules of those names) instead
// of their addresses: an A query gets addr, any other type no records
// (the VM then connects over IPv4, to the proxy). nil m: none. Names
// the sandbox may not resolve at all still get NXDOMAIN.
func (f *Forwarder) SetIntercept(m Matcher, addr netip.Addr) {
	f.intercepted.Store(&intercept{match: m, addr: addr})
}

// interceptReply is the proxy's answer to q, or nil when q's name is not
// intercepted.
func (f *Forwarder) interceptReply(q *dns.Msg) []byte {
	in := f.intercepted.Load()
	name := q.Question[0].Name
	if in == nil || in.match == nil || strings.ContainsRune(name, '\\') || !in.match(name) {
		return nil
	}
	r := new(dns.Msg).SetReply(q)
	r.RecursionAvailable = true
	if q.Question[0].Qtype == dns.TypeA {
		r.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: InterceptTTL},
			A: net.IP(in.addr.AsSlice())}}
	}
	b, err := r.Pack()
	if err != nil {
		return reply(q, dns.RcodeServerFailure)
	}
	return b
}

// LookupA resolves host's IPv4 addresses through the upstreams, for the
// egress proxy (which dials the rule's domain itself, never where the
// VM pointed it).
func (f *Forwarder) LookupA(ctx context.Context, host string) ([]netip.Addr, error) {
	if !f.names.Load().answered(dns.Fqdn(host)) {
		// The VM's own query would not leave either (egress closed).
		return nil, fmt.Errorf("resolve %s: not a name this sandbox may resolve", host)
	}
	return f.LookupAnyA(ctx, host)
}

// LookupAnyA resolves host through the upstreams whatever the sandbox
// may resolve: a name of its spec (its egress proxy's), not its guest's.
func (f *Forwarder) LookupAnyA(ctx context.Context, host string) ([]netip.Addr, error) {
	q := new(dns.Msg).SetQuestion(dns.Fqdn(host), dns.TypeA)
	r, _, err := f.resolve(ctx, q, false)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("resolve %s: %s", host, dns.RcodeToString[r.Rcode])
	}
	var out []netip.Addr
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				out = append(out, ip)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("resolve %s: no IPv4 address", host)
	}
	return out, nil
}

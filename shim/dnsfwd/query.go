package dnsfwd

import (
	"context"
	"encoding/binary"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

const (
	headerLen = 12
	// maxQuerySize bounds a client's query: one question with EDNS0 fits
	// in far less, so anything bigger is refused unparsed.
	maxQuerySize = 512
)

// handle answers one raw query from the VM; nil means send nothing.
func (f *Forwarder) handle(ctx context.Context, raw []byte, tcp bool) []byte {
	q, refusal := parseQuery(raw)
	if q == nil {
		return refusal
	}
	if !f.names.Load().answered(q.Question[0].Name) {
		return reply(q, dns.RcodeNameError) // NXDOMAIN: a search list goes on to the next name
	}
	if b := f.interceptReply(q); b != nil {
		return b
	}
	r, out, err := f.resolve(ctx, q, tcp)
	if err != nil {
		// The VM sees SERVFAIL; failing upstreams are the shim's to monitor.
		return reply(q, dns.RcodeServerFailure)
	}
	if learned := f.learn(q.Question[0].Name, r); learned > 0 {
		// The VM must not cache an address past the time it stays open.
		if capTTLs(r, learned) {
			if out, err = r.Pack(); err != nil {
				return reply(q, dns.RcodeServerFailure)
			}
		}
	}
	if size := udpSize(q); !tcp && len(out) > size {
		r.Id = q.Id
		r.Truncate(size) // the full answer was learned; the VM retries over TCP
		b, err := r.Pack()
		if err != nil {
			return reply(q, dns.RcodeServerFailure)
		}
		return b
	}
	binary.BigEndian.PutUint16(out, q.Id) // otherwise unchanged
	return out
}

// parseQuery returns the query in raw, or else the reply to send (nil:
// none, for what is not a query at all).
func parseQuery(raw []byte) (*dns.Msg, []byte) {
	if len(raw) < headerLen || raw[2]&0x80 != 0 { // QR set: a response
		return nil, nil
	}
	if len(raw) > maxQuerySize {
		return nil, headerReply(raw, dns.RcodeFormatError)
	}
	q := new(dns.Msg)
	if err := q.Unpack(raw); err != nil || len(q.Question) != 1 {
		return nil, headerReply(raw, dns.RcodeFormatError)
	}
	if q.Opcode != dns.OpcodeQuery || q.Question[0].Qclass != dns.ClassINET {
		return nil, reply(q, dns.RcodeRefused)
	}
	switch q.Question[0].Qtype {
	case dns.TypeAXFR, dns.TypeIXFR: // multi-message answers are not relayed
		return nil, reply(q, dns.RcodeRefused)
	}
	return q, nil
}

// reply is a bare answer to q with rcode.
func reply(q *dns.Msg, rcode int) []byte {
	b, err := new(dns.Msg).SetRcode(q, rcode).Pack()
	if err != nil {
		return nil
	}
	return b
}

// headerReply answers raw with rcode from its header alone (its ID and
// opcode), for queries that cannot or need not be parsed.
func headerReply(raw []byte, rcode int) []byte {
	if len(raw) < headerLen || raw[2]&0x80 != 0 {
		return nil
	}
	m := &dns.Msg{MsgHdr: dns.MsgHdr{
		Id:       binary.BigEndian.Uint16(raw),
		Response: true,
		Opcode:   int(raw[2]>>3) & 0xf,
		Rcode:    rcode,
	}}
	b, err := m.Pack()
	if err != nil {
		return nil
	}
	return b
}

// udpSize is the largest reply the client accepts over UDP.
func udpSize(q *dns.Msg) int {
	if opt := q.IsEdns0(); opt != nil {
		return max(dns.MinMsgSize, int(opt.UDPSize()))
	}
	return dns.MinMsgSize
}

// learn passes the A records of a successful answer for an allowed name
// to the Learner, with their smallest TTL clamped; it returns that time
// (0: nothing learned).
func (f *Forwarder) learn(name string, r *dns.Msg) time.Duration {
	if r.Rcode != dns.RcodeSuccess {
		return 0
	}
	if !f.names.Load().allowed(name) {
		return 0
	}
	var addrs []netip.Addr
	ttl := uint32(math.MaxUint32)
	for _, rr := range r.Answer {
		a, ok := rr.(*dns.A)
		if !ok || a.Hdr.Class != dns.ClassINET {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.A.To4())
		if !ok {
			continue
		}
		addrs = append(addrs, ip)
		ttl = min(ttl, a.Hdr.Ttl)
	}
	if len(addrs) == 0 {
		return 0
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	d := f.clamp(ttl)
	f.learner.Learn(strings.TrimSuffix(strings.ToLower(name), "."), slices.Compact(addrs), d)
	return d
}

// capTTLs lowers the answer's TTLs to d; it reports whether any changed.
func capTTLs(r *dns.Msg, d time.Duration) bool {
	limit, changed := uint32(d/time.Second), false
	for _, rr := range r.Answer {
		if h := rr.Header(); h.Ttl > limit {
			h.Ttl, changed = limit, true
		}
	}
	return changed
}

func (f *Forwarder) clamp(ttl uint32) time.Duration {
	return min(max(time.Duration(ttl)*time.Second, f.minTTL), f.maxTTL)
}

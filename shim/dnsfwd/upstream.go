package dnsfwd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// udpBufs holds read buffers big enough for any UDP reply.
var udpBufs = sync.Pool{New: func() any { b := make([]byte, dns.MaxMsgSize); return &b }}

// resolve asks the upstreams in order and returns the first usable
// reply, parsed and as received (its ID is the forwarded query's).
func (f *Forwarder) resolve(ctx context.Context, q *dns.Msg, tcp bool) (*dns.Msg, []byte, error) {
	fq := upstreamQuery(q)
	packed, err := fq.Pack()
	if err != nil {
		return nil, nil, fmt.Errorf("pack query: %w", err)
	}
	var errs []error
	for _, u := range f.upstreams {
		r, raw, err := f.try(ctx, u, fq, packed, tcp)
		if err == nil {
			return r, raw, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, fmt.Errorf("all upstreams failed: %w", errors.Join(errs...))
}

// upstreamQuery rebuilds the client's query with a fresh ID, keeping
// only its question, its RD, CD and AD bits and its EDNS0 OPT.
func upstreamQuery(q *dns.Msg) *dns.Msg {
	m := &dns.Msg{
		MsgHdr: dns.MsgHdr{
			Id:                dns.Id(),
			Opcode:            dns.OpcodeQuery,
			RecursionDesired:  q.RecursionDesired,
			CheckingDisabled:  q.CheckingDisabled,
			AuthenticatedData: q.AuthenticatedData,
		},
		Question: []dns.Question{q.Question[0]},
	}
	if opt := q.IsEdns0(); opt != nil {
		m.Extra = []dns.RR{opt}
	}
	return m
}

// try asks one upstream: over TCP for TCP clients, else over UDP and
// again over TCP if the UDP reply is truncated.
func (f *Forwarder) try(ctx context.Context, addr string, q *dns.Msg, packed []byte, tcp bool) (*dns.Msg, []byte, error) {
	if !tcp {
		r, raw, err := f.exchange(ctx, "udp", addr, q, packed)
		if err != nil || !r.Truncated {
			return r, raw, err
		}
	}
	return f.exchange(ctx, "tcp", addr, q, packed)
}

// exchange sends packed to addr over network and reads the reply, all
// within one Timeout (cut short by Close).
func (f *Forwarder) exchange(ctx context.Context, network, addr string, q *dns.Msg, packed []byte) (*dns.Msg, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	c, err := f.dial(ctx, network, addr)
	if err != nil {
		return nil, nil, fmt.Errorf("upstream %s/%s: dial: %w", addr, network, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(dl); err != nil {
			return nil, nil, fmt.Errorf("upstream %s/%s: set deadline: %w", addr, network, err)
		}
	}
	var r *dns.Msg
	var raw []byte
	if network == "tcp" {
		r, raw, err = roundTripTCP(c, q, packed)
	} else {
		r, raw, err = roundTripUDP(c, q, packed)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("upstream %s/%s: %w", addr, network, err)
	}
	return r, raw, nil
}

// roundTripUDP ignores datagrams that are not the reply to q, until the
// deadline.
func roundTripUDP(c net.Conn, q *dns.Msg, packed []byte) (*dns.Msg, []byte, error) {
	if _, err := c.Write(packed); err != nil {
		return nil, nil, fmt.Errorf("write: %w", err)
	}
	bp := udpBufs.Get().(*[]byte)
	defer udpBufs.Put(bp)
	buf := *bp
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, nil, fmt.Errorf("read: %w", err)
		}
		if r, err := parseReply(buf[:n], q); err == nil {
			return r, append([]byte(nil), buf[:n]...), nil
		}
	}
}

func roundTripTCP(c net.Conn, q *dns.Msg, packed []byte) (*dns.Msg, []byte, error) {
	if err := writeFrame(c, packed); err != nil {
		return nil, nil, err
	}
	raw, err := readFrame(c)
	if err != nil {
		return nil, nil, err
	}
	r, err := parseReply(raw, q)
	if err != nil {
		return nil, nil, err
	}
	return r, raw, nil
}

// parseReply checks raw is a usable reply to q. A truncated reply that
// does not parse whole is accepted as such: it only causes a TCP retry.
func parseReply(raw []byte, q *dns.Msg) (*dns.Msg, error) {
	if len(raw) < headerLen {
		return nil, errors.New("short reply")
	}
	r := new(dns.Msg)
	err := r.Unpack(raw) // sets the header even when a section is bad
	switch {
	case r.Id != q.Id || !r.Response:
		return nil, errors.New("not a reply to the query")
	case err != nil && r.Truncated:
		return r, nil
	case err != nil:
		return nil, fmt.Errorf("unpack reply: %w", err)
	case r.Rcode == dns.RcodeServerFailure || r.Rcode == dns.RcodeRefused:
		return nil, fmt.Errorf("upstream answered %s", dns.RcodeToString[r.Rcode])
	case len(r.Question) != 1 || !sameQuestion(r.Question[0], q.Question[0]):
		return nil, errors.New("reply is for another question")
	}
	return r, nil
}

func sameQuestion(a, b dns.Question) bool {
	return a.Qtype == b.Qtype && a.Qclass == b.Qclass && strings.EqualFold(a.Name, b.Name)
}

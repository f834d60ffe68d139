package dnsfwd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// bigCount A records make big.example.com. too large for 512-byte UDP.
const bigCount = 40

// zone is the test upstream's data: lower-case name to records.
var zone = map[string][]string{
	"a.example.com.":     {"a.example.com. 300 IN A 192.0.2.1", "a.example.com. 60 IN A 192.0.2.2"},
	"short.example.com.": {"short.example.com. 1 IN A 192.0.2.3"},
	"long.example.com.":  {"long.example.com. 86400 IN A 192.0.2.4"},
	"www.example.org.":   {"www.example.org. 10 IN CNAME edge.cdn.test.", "edge.cdn.test. 30 IN A 198.51.100.7"},
	"v6.example.com.":    {"v6.example.com. 300 IN AAAA 2001:db8::1"},
	"other.example.net.": {"other.example.net. 300 IN A 203.0.113.9"},
	"wild.test.":         {"wild.test. 300 IN A 203.0.113.20"},
	"sub.wild.test.":     {"sub.wild.test. 300 IN A 203.0.113.21"},
}

func bigAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)}) }

// upstream is a real miekg/dns server on 127.0.0.1 (UDP and TCP, one
// port) that answers from zone and records what it was asked.
type upstream struct {
	addr string
	mu   sync.Mutex
	seen []string // "network name", in order
}

func startUpstream(t testing.TB) *upstream {
	t.Helper()
	pc, l := listenPair(t)
	u := &upstream{addr: pc.LocalAddr().String()}
	serve(t, &dns.Server{PacketConn: pc, Handler: u})
	serve(t, &dns.Server{Listener: l, Handler: u})
	return u
}

func serve(t testing.TB, s *dns.Server) {
	started := make(chan struct{})
	s.NotifyStartedFunc = func() { close(started) }
	errc := make(chan error, 1)
	go func() { errc <- s.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("upstream: %v", err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
}

func (u *upstream) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	network := w.LocalAddr().Network()
	name := strings.ToLower(q.Question[0].Name)
	u.mu.Lock()
	u.seen = append(u.seen, network+" "+name)
	u.mu.Unlock()
	m := new(dns.Msg).SetReply(q)
	switch {
	case name == "big.example.com." && network == "udp":
		m.Truncated = true
	case name == "big.example.com.":
		for i := range bigCount {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 120},
				A:   bigAddr(i).AsSlice(),
			})
		}
	case strings.HasSuffix(name, ".echo.test."):
		m.Answer = append(m.Answer, mustRR(q.Question[0].Name+" 300 IN A 192.0.2.50"))
	case zone[name] == nil:
		m.Rcode = dns.RcodeNameError
	}
	for _, s := range zone[name] {
		if rr := mustRR(s); q.Question[0].Qtype == dns.TypeANY || rr.Header().Rrtype == q.Question[0].Qtype || rr.Header().Rrtype == dns.TypeCNAME {
			m.Answer = append(m.Answer, rr)
		}
	}
	if opt := q.IsEdns0(); opt != nil {
		m.SetEdns0(opt.UDPSize(), false)
	}
	_ = w.WriteMsg(m)
}

func (u *upstream) asked() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

func mustRR(s string) dns.RR {
	rr, err := dns.NewRR(s)
	if err != nil {
		panic(fmt.Sprintf("bad test record %q: %v", s, err))
	}
	return rr
}

// learned is one Learn call.
type learned struct {
	addrs []netip.Addr
	ttl   time.Duration
}

// recorder is a Learner that records calls; if hold is set, Learn
// reports each call on it and blocks until release is closed.
type recorder struct {
	mu      sync.Mutex
	calls   []learned
	hold    chan learned
	release chan struct{}
}

func (r *recorder) Learn(_ string, addrs []netip.Addr, ttl time.Duration) {
	c := learned{slices.Clone(addrs), ttl}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	if r.hold != nil {
		r.hold <- c
		<-r.release
	}
}

func (r *recorder) got() []learned {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// harness is a Forwarder serving on 127.0.0.1 UDP and TCP sockets.
type harness struct {
	f        *Forwarder
	udp, tcp string
	served   chan error // one result per Serve loop
}

func startForwarder(t *testing.T, cfg Config) *harness {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{f: f, udp: pc.LocalAddr().String(), tcp: l.Addr().String(), served: make(chan error, 2)}
	go func() { h.served <- f.ServePacket(pc) }()
	go func() { h.served <- f.ServeListener(l) }()
	t.Cleanup(func() { _ = f.Close() })
	return h
}

// query asks the forwarder for name/qtype over network ("udp", "tcp").
func (h *harness) query(t *testing.T, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	r, err := h.exchange(network, new(dns.Msg).SetQuestion(name, qtype))
	if err != nil {
		t.Fatalf("query %s %s: %v", network, name, err)
	}
	return r
}

func (h *harness) exchange(network string, q *dns.Msg) (*dns.Msg, error) {
	addr := h.udp
	if network == "tcp" {
		addr = h.tcp
	}
	c := &dns.Client{Net: network, Timeout: 10 * time.Second}
	r, _, err := c.ExchangeContext(context.Background(), q, addr)
	return r, err
}

// listenPair listens on one 127.0.0.1 port for UDP and TCP. The UDP
// port the kernel picks may be taken for TCP, so it tries a few.
func listenPair(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	var err error
	for range 50 {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			break
		}
		var l net.Listener
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			return pc, l
		}
		_ = pc.Close()
	}
	t.Fatalf("listen on a UDP and TCP port: %v", err)
	return nil, nil
}

// deadAddr is a 127.0.0.1 port nothing listens on (UDP or TCP).
func deadAddr(t *testing.T) string {
	t.Helper()
	pc, l := listenPair(t)
	addr := pc.LocalAddr().String()
	if err := errors.Join(pc.Close(), l.Close()); err != nil {
		t.Fatal(err)
	}
	return addr
}

// blackhole is a UDP and TCP port that takes queries and never answers.
func blackhole(t *testing.T) string {
	t.Helper()
	pc, l := listenPair(t)
	t.Cleanup(func() { _ = pc.Close(); _ = l.Close() })
	return pc.LocalAddr().String()
}

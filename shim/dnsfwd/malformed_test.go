package dnsfwd

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func pack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// badQueries are queries the forwarder must answer itself, with rcode.
func badQueries(t testing.TB) map[string]struct {
	raw   []byte
	rcode int
} {
	junk := append([]byte{0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}, 0x3f, 'x', 'y')
	two := new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "other.example.net.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	none := new(dns.Msg)
	big := new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA).SetEdns0(1232, false)
	big.IsEdns0().Option = append(big.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 600)})
	chaos := new(dns.Msg).SetQuestion("version.bind.", dns.TypeTXT)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	notify := new(dns.Msg).SetQuestion("a.example.com.", dns.TypeSOA)
	notify.Opcode = dns.OpcodeNotify
	status := new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA)
	status.Opcode = dns.OpcodeStatus
	axfr := new(dns.Msg).SetQuestion("example.com.", dns.TypeAXFR)
	type bad = struct {
		raw   []byte
		rcode int
	}
	return map[string]bad{
		"junk question": {junk, dns.RcodeFormatError},
		"two questions": {pack(t, two), dns.RcodeFormatError},
		"no question":   {pack(t, none), dns.RcodeFormatError},
		"oversize":      {pack(t, big), dns.RcodeFormatError},
		"class CH":      {pack(t, chaos), dns.RcodeRefused},
		"opcode NOTIFY": {pack(t, notify), dns.RcodeRefused},
		"opcode STATUS": {pack(t, status), dns.RcodeRefused},
		"AXFR":          {pack(t, axfr), dns.RcodeRefused},
	}
}

func TestMalformedUDP(t *testing.T) {
	up := startUpstream(t)
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: &recorder{}})
	h.f.SetMatcher(matchAll, false, nil)
	c, err := net.Dial("udp", h.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for name, bad := range badQueries(t) {
		id := uint16(bad.raw[0])<<8 | uint16(bad.raw[1])
		r := roundTrip(t, c, bad.raw)
		if r.Id != id || !r.Response || r.Rcode != bad.rcode || len(r.Answer) != 0 || len(r.Question) > 1 {
			t.Errorf("%s: reply %v, want rcode %s", name, r, dns.RcodeToString[bad.rcode])
		}
	}
	// Nothing is sent back for what is not a query; the next reply on the
	// socket is the valid query's.
	resp := new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA)
	resp.Response = true
	for _, raw := range [][]byte{{1, 2, 3}, {}, pack(t, resp)} {
		if _, err := c.Write(raw); err != nil {
			t.Fatal(err)
		}
	}
	q := new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA)
	if r := roundTrip(t, c, pack(t, q)); r.Id != q.Id || len(r.Answer) != 2 {
		t.Fatalf("valid query after bad ones: %v", r)
	}
	if got := up.asked(); !slices.Equal(got, []string{"udp a.example.com."}) {
		t.Fatalf("upstream asked %q", got)
	}
}

func TestMalformedTCP(t *testing.T) {
	up := startUpstream(t)
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: &recorder{}})
	c, err := net.Dial("tcp", h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for name, bad := range badQueries(t) {
		if err := writeFrame(c, bad.raw); err != nil {
			t.Fatal(err)
		}
		raw, err := readFrame(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := new(dns.Msg)
		if err := r.Unpack(raw); err != nil || r.Rcode != bad.rcode {
			t.Errorf("%s: reply %v (%v), want rcode %s", name, r, err, dns.RcodeToString[bad.rcode])
		}
	}
	q := new(dns.Msg).SetQuestion("other.example.net.", dns.TypeA)
	if err := writeFrame(c, pack(t, q)); err != nil {
		t.Fatal(err)
	}
	raw, err := readFrame(c)
	r := new(dns.Msg)
	if err != nil || r.Unpack(raw) != nil || r.Id != q.Id || len(r.Answer) != 1 {
		t.Fatalf("valid query after bad ones: %v, %v", r, err)
	}
}

func roundTrip(t *testing.T, c net.Conn, raw []byte) *dns.Msg {
	t.Helper()
	if _, err := c.Write(raw); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, dns.MaxMsgSize)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatalf("unpack reply: %v", err)
	}
	return r
}

// FuzzQuery feeds arbitrary bytes to the query handler, as a UDP and as
// a TCP client would send them: it must not panic, must not answer what
// is not a query, and must answer with the query's ID within its size.
func FuzzQuery(f *testing.F) {
	for _, bad := range badQueries(f) {
		f.Add(bad.raw)
	}
	for _, q := range []*dns.Msg{
		new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA),
		new(dns.Msg).SetQuestion("big.example.com.", dns.TypeA),
		new(dns.Msg).SetQuestion("big.example.com.", dns.TypeA).SetEdns0(700, true),
		new(dns.Msg).SetQuestion("www.example.org.", dns.TypeANY),
		new(dns.Msg).SetQuestion(`x\000y.echo.test.`, dns.TypeA),
	} {
		f.Add(pack(f, q))
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add(make([]byte, 600))

	up := startUpstream(f)
	fwd, err := New(Config{Upstreams: []string{up.addr}, Learner: &recorder{}, Timeout: 500 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = fwd.Close() })
	fwd.SetMatcher(matchAll, false, nil)
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, tcp := range []bool{false, true} {
			checkReply(t, raw, fwd.handle(t.Context(), raw, tcp), tcp)
		}
	})
}

func checkReply(t *testing.T, raw, out []byte, tcp bool) {
	if out == nil {
		return
	}
	if len(raw) < headerLen || raw[2]&0x80 != 0 {
		t.Fatalf("answered a non-query %x", raw)
	}
	r := new(dns.Msg)
	if err := r.Unpack(out); err != nil && !r.Truncated {
		t.Fatalf("reply does not parse: %v", err)
	}
	if r.Id != uint16(raw[0])<<8|uint16(raw[1]) || !r.Response {
		t.Fatalf("reply %v does not match query %x", r, raw)
	}
	q := new(dns.Msg)
	if !tcp && q.Unpack(raw) == nil && len(out) > udpSize(q) {
		t.Fatalf("UDP reply of %d bytes exceeds the client's %d", len(out), udpSize(q))
	}
}

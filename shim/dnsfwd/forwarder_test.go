package dnsfwd

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func matchAll(string) bool { return true }

func wantLearned(t *testing.T, rec *recorder, want ...learned) {
	t.Helper()
	got := rec.got()
	if len(got) != len(want) {
		t.Fatalf("Learn calls = %v, want %v", got, want)
	}
	for i := range got {
		if !slices.Equal(got[i].addrs, want[i].addrs) || got[i].ttl != want[i].ttl {
			t.Fatalf("Learn call %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestNewRefuses(t *testing.T) {
	rec := &recorder{}
	for name, cfg := range map[string]Config{
		"no upstreams": {Learner: rec},
		"no port":      {Upstreams: []string{"127.0.0.1"}, Learner: rec},
		"hostname":     {Upstreams: []string{"dns.example:53"}, Learner: rec},
		"port zero":    {Upstreams: []string{"127.0.0.1:0"}, Learner: rec},
		"no learner":   {Upstreams: []string{"127.0.0.1:53"}},
		"ttl inverted": {Upstreams: []string{"127.0.0.1:53"}, Learner: rec, MinTTL: time.Hour, MaxTTL: time.Minute},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func TestLearnAllowed(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	rules := sandlotv1.NetworkRules{AllowDomains: []string{"a.example.com", "short.example.com", "long.example.com", "www.example.org", "v6.example.com"}}
	h.f.SetMatcher(rules.MatchDomain, false, nil)

	q := new(dns.Msg).SetQuestion("A.Example.COM.", dns.TypeA)
	q.Id = 0x1234
	r, err := h.exchange("udp", q)
	if err != nil {
		t.Fatal(err)
	}
	if r.Id != 0x1234 || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Fatalf("reply = %v", r)
	}
	// Learn ran before the reply was written: it is recorded already.
	wantLearned(t, rec, learned{addrs("192.0.2.1", "192.0.2.2"), 60 * time.Second})

	h.query(t, "udp", "short.example.com.", dns.TypeA)
	h.query(t, "udp", "long.example.com.", dns.TypeA)
	r = h.query(t, "udp", "www.example.org.", dns.TypeA)
	if len(r.Answer) != 2 {
		t.Fatalf("CNAME reply = %v", r)
	}
	h.query(t, "udp", "v6.example.com.", dns.TypeAAAA)
	h.query(t, "udp", "v6.example.com.", dns.TypeA)
	wantLearned(t, rec,
		learned{addrs("192.0.2.1", "192.0.2.2"), 60 * time.Second},
		learned{addrs("192.0.2.3"), DefaultMinTTL},
		learned{addrs("192.0.2.4"), DefaultMaxTTL},
		learned{addrs("198.51.100.7"), 30 * time.Second},
	)
}

func TestLearnBeforeReply(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{hold: make(chan learned), release: make(chan struct{})}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	h.f.SetMatcher(matchAll, false, nil)
	done := make(chan *dns.Msg)
	go func() {
		r, _ := h.exchange("udp", new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA))
		done <- r
	}()
	<-rec.hold
	select {
	case <-done:
		t.Fatal("reply arrived while Learn was still running")
	default:
	}
	close(rec.release)
	if r := <-done; r == nil || len(r.Answer) != 2 {
		t.Fatalf("reply = %v", r)
	}
}

func TestDisallowedAnsweredNotLearned(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	r := h.query(t, "udp", "other.example.net.", dns.TypeA) // no matcher yet
	rules := sandlotv1.NetworkRules{AllowDomains: []string{"a.example.com"}}
	h.f.SetMatcher(rules.MatchDomain, false, nil)
	r2 := h.query(t, "udp", "other.example.net.", dns.TypeA)
	for _, r := range []*dns.Msg{r, r2} {
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "203.0.113.9" {
			t.Fatalf("reply = %v", r)
		}
	}
	if r := h.query(t, "udp", "nx.example.com.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("NXDOMAIN relayed as %v", r)
	}
	wantLearned(t, rec)
}

func TestWildcardMatchDomain(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	rules := sandlotv1.NetworkRules{AllowDomains: []string{"*.wild.test"}}
	h.f.SetMatcher(rules.MatchDomain, false, nil)
	h.query(t, "udp", "wild.test.", dns.TypeA) // *. is subdomains only
	h.query(t, "udp", "sub.wild.test.", dns.TypeA)
	wantLearned(t, rec, learned{addrs("203.0.113.21"), 300 * time.Second})
}

func TestEscapedNameNotLearned(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	h.f.SetMatcher(matchAll, false, nil)
	if r := h.query(t, "udp", `evil\.x.echo.test.`, dns.TypeA); len(r.Answer) != 1 {
		t.Fatalf("reply = %v", r)
	}
	h.query(t, "udp", "ok.echo.test.", dns.TypeA)
	wantLearned(t, rec, learned{addrs("192.0.2.50"), 300 * time.Second})
}

func TestMatcherSwappedLive(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec, MinTTL: time.Second, MaxTTL: 2 * time.Minute})
	h.f.SetMatcher(sandlotv1.NetworkRules{AllowDomains: []string{"a.example.com"}}.MatchDomain, false, nil)
	h.query(t, "udp", "a.example.com.", dns.TypeA)
	h.query(t, "udp", "other.example.net.", dns.TypeA)
	h.f.SetMatcher(sandlotv1.NetworkRules{AllowDomains: []string{"other.example.net"}}.MatchDomain, false, nil)
	h.query(t, "udp", "a.example.com.", dns.TypeA)
	h.query(t, "udp", "other.example.net.", dns.TypeA)
	h.f.SetMatcher(nil, false, nil)
	h.query(t, "udp", "other.example.net.", dns.TypeA)
	wantLearned(t, rec,
		learned{addrs("192.0.2.1", "192.0.2.2"), 60 * time.Second},
		learned{addrs("203.0.113.9"), 2 * time.Minute},
	)
}

func TestTruncatedRetriedOverTCP(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	h.f.SetMatcher(matchAll, false, nil)
	var all []netip.Addr
	for i := range bigCount {
		all = append(all, bigAddr(i))
	}

	r := h.query(t, "udp", "big.example.com.", dns.TypeA) // no EDNS: 512 bytes
	if !r.Truncated || len(r.Answer) >= bigCount {
		t.Fatalf("plain UDP client got %d answers, TC=%v", len(r.Answer), r.Truncated)
	}
	q := new(dns.Msg).SetQuestion("big.example.com.", dns.TypeA).SetEdns0(4096, false)
	if r, err := h.exchange("udp", q); err != nil || r.Truncated || len(r.Answer) != bigCount {
		t.Fatalf("EDNS UDP client: %v, %v", r, err)
	}
	want := []string{"udp big.example.com.", "tcp big.example.com.", "udp big.example.com.", "tcp big.example.com."}
	if got := up.asked(); !slices.Equal(got, want) {
		t.Fatalf("upstream asked %q, want %q", got, want)
	}
	wantLearned(t, rec, learned{all, 2 * time.Minute}, learned{all, 2 * time.Minute})
}

func TestTCPClient(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	h.f.SetMatcher(matchAll, false, nil)
	if r := h.query(t, "tcp", "big.example.com.", dns.TypeA); r.Truncated || len(r.Answer) != bigCount {
		t.Fatalf("TCP reply: TC=%v, %d answers", r.Truncated, len(r.Answer))
	}
	// Several queries on one connection.
	c, err := (&dns.Client{Net: "tcp"}).Dial(h.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, name := range []string{"a.example.com.", "other.example.net."} {
		if err := c.WriteMsg(new(dns.Msg).SetQuestion(name, dns.TypeA)); err != nil {
			t.Fatal(err)
		}
		if r, err := c.ReadMsg(); err != nil || len(r.Answer) == 0 || !strings.EqualFold(r.Question[0].Name, name) {
			t.Fatalf("%s over TCP: %v, %v", name, r, err)
		}
	}
	want := []string{"tcp big.example.com.", "tcp a.example.com.", "tcp other.example.net."}
	if got := up.asked(); !slices.Equal(got, want) {
		t.Fatalf("upstream asked %q, want %q", got, want)
	}
	if n := len(rec.got()); n != 3 {
		t.Fatalf("%d Learn calls, want 3", n)
	}
}

func TestUpstreamFailover(t *testing.T) {
	up := startUpstream(t)
	for name, first := range map[string]string{"refused": deadAddr(t), "silent": blackhole(t)} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			h := startForwarder(t, Config{Upstreams: []string{first, up.addr}, Learner: rec, Timeout: 200 * time.Millisecond})
			h.f.SetMatcher(matchAll, false, nil)
			for _, network := range []string{"udp", "tcp"} {
				if r := h.query(t, network, "a.example.com.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
					t.Fatalf("%s reply = %v", network, r)
				}
			}
			if n := len(rec.got()); n != 2 {
				t.Fatalf("%d Learn calls, want 2", n)
			}
		})
	}
}

func TestAllUpstreamsDead(t *testing.T) {
	const timeout = 300 * time.Millisecond
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{deadAddr(t), blackhole(t)}, Learner: rec, Timeout: timeout})
	h.f.SetMatcher(matchAll, false, nil)
	for _, network := range []string{"udp", "tcp"} {
		start := time.Now()
		r := h.query(t, network, "a.example.com.", dns.TypeA)
		if took := time.Since(start); took > 2*timeout+time.Second {
			t.Errorf("%s: SERVFAIL took %v", network, took)
		}
		if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
			t.Fatalf("%s reply = %v", network, r)
		}
	}
	wantLearned(t, rec)
}

func TestBusyServfail(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{hold: make(chan learned), release: make(chan struct{})}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec, MaxInflight: 1})
	h.f.SetMatcher(matchAll, false, nil)
	first := make(chan *dns.Msg)
	go func() {
		r, _ := h.exchange("udp", new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA))
		first <- r
	}()
	<-rec.hold // the only slot is taken
	if r := h.query(t, "udp", "other.example.net.", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("query beyond MaxInflight: %v", r)
	}
	close(rec.release)
	if r := <-first; r == nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("first reply = %v", r)
	}
}

func TestCloseStopsServing(t *testing.T) {
	dialed := make(chan struct{})
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		defer close(dialed)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	h := startForwarder(t, Config{Upstreams: []string{blackhole(t)}, Learner: &recorder{}, Dial: dial, Timeout: time.Hour})
	inflight := make(chan error)
	go func() {
		_, err := h.exchange("tcp", new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA))
		inflight <- err
	}()
	<-dialed // the query is now stuck at the silent upstream
	if err := h.f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		if err := <-h.served; err != nil {
			t.Fatalf("Serve after Close: %v", err)
		}
	}
	if err := <-inflight; err == nil {
		t.Fatal("in-flight TCP query answered after Close")
	}
	if _, err := net.Dial("tcp", h.tcp); err == nil {
		t.Fatal("TCP still accepted after Close")
	}
	if r, err := h.exchange("udp", new(dns.Msg).SetQuestion("a.example.com.", dns.TypeA)); err == nil {
		t.Fatalf("UDP answered after Close: %v", r)
	}
	if err := h.f.ServePacket(nil); err != ErrClosed {
		t.Fatalf("ServePacket after Close = %v", err)
	}
	if err := h.f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestEgressClosedNoTunnel: with the sandbox's egress closed, a name
// allowOut does not match gets NXDOMAIN from the forwarder itself — the
// upstream never sees it, so encoding data in names leaks nothing —
// while an allowed name resolves and is learned; opening egress again
// resolves every name.
func TestEgressClosedNoTunnel(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	rules := sandlotv1.NetworkRules{AllowDomains: []string{"a.example.com"}}
	h.f.SetMatcher(rules.MatchDomain, true, nil)
	for _, name := range []string{"c2VjcmV0.other.example.net.", `a\.example.com.x.example.net.`, "a.example.com.svc.cluster.local."} {
		for _, network := range []string{"udp", "tcp"} {
			if r := h.query(t, network, name, dns.TypeTXT); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
				t.Fatalf("%s over %s with egress closed: %v, want NXDOMAIN", name, network, r)
			}
		}
	}
	if r := h.query(t, "udp", "a.example.com.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Fatalf("an allowed name with egress closed: %v", r)
	}
	h.f.SetMatcher(rules.MatchDomain, false, nil)
	if r := h.query(t, "udp", "other.example.net.", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("with egress open again: %v", r)
	}
	if got, want := up.asked(), []string{"udp a.example.com.", "udp other.example.net."}; !slices.Equal(got, want) {
		t.Fatalf("upstream asked %q, want only %q", got, want)
	}
	wantLearned(t, rec, learned{addrs("192.0.2.1", "192.0.2.2"), 60 * time.Second})
}

// TestEgressClosedResolvesOperatorNames: with egress closed, the names
// the operator lets be resolved (cluster names) are answered but never
// learned (an answer opens nothing); any other name still gets NXDOMAIN
// without a query upstream.
func TestEgressClosedResolvesOperatorNames(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	cluster := sandlotv1.NetworkRules{AllowDomains: []string{"*.echo.test"}} // the upstream answers these
	h.f.SetMatcher(nil, true, cluster.MatchDomain)
	if r := h.query(t, "udp", "api.echo.test.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		t.Fatalf("an operator's cluster name with egress closed: %v", r)
	}
	for _, name := range []string{"c2VjcmV0.other.example.net.", `x\.echo.test.`, "echo.test.evil.example."} {
		if r := h.query(t, "udp", name, dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Fatalf("%s with egress closed: %v, want NXDOMAIN", name, r)
		}
	}
	if got, want := up.asked(), []string{"udp api.echo.test."}; !slices.Equal(got, want) {
		t.Fatalf("upstream asked %q, want only %q", got, want)
	}
	if n := len(rec.got()); n != 0 {
		t.Fatalf("%d answers learned, want none: a resolvable name opens nothing", n)
	}
}

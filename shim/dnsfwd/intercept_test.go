package dnsfwd

import (
	"context"
	"testing"

	"github.com/miekg/dns"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestInterceptAnswersTheProxy(t *testing.T) {
	up := startUpstream(t)
	rec := &recorder{}
	h := startForwarder(t, Config{Upstreams: []string{up.addr}, Learner: rec})
	rules := sandlotv1.NetworkRules{AllowDomains: []string{"a.example.com"}}
	h.f.SetMatcher(rules.MatchDomain, false, nil)
	proxy := addrs("169.254.53.53")[0]
	h.f.SetIntercept(func(n string) bool { return n == "a.example.com." || n == "other.example.net." }, proxy)

	r := h.query(t, "udp", "a.example.com.", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "169.254.53.53" || r.Answer[0].Header().Ttl != InterceptTTL {
		t.Fatalf("intercepted A = %v", r)
	}
	if r := h.query(t, "udp", "a.example.com.", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("intercepted AAAA = %v", r)
	}
	wantLearned(t, rec) // the VM goes to the proxy: nothing opened

	// The proxy resolves the real addresses itself.
	got, err := h.f.LookupA(context.Background(), "a.example.com")
	if err != nil || len(got) != 2 {
		t.Fatalf("LookupA = %v, %v", got, err)
	}
	// With egress closed a name the sandbox may not resolve is neither
	// intercepted nor looked up for the proxy: a query is a message out.
	h.f.SetMatcher(rules.MatchDomain, true, nil)
	if r := h.query(t, "udp", "other.example.net.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("closed, unallowed name = %v", r)
	}
	if _, err := h.f.LookupA(context.Background(), "other.example.net"); err == nil {
		t.Fatal("LookupA resolved a name the sandbox may not resolve")
	}
	h.f.SetIntercept(nil, proxy)
	if r := h.query(t, "udp", "a.example.com.", dns.TypeA); len(r.Answer) != 2 {
		t.Fatalf("after the rule went: %v", r)
	}
}

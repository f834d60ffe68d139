package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// world is a proxy in front of two local upstreams (TLS and plain) that
// record the Authorization header each request brought.
type world struct {
	p              *Proxy
	httpL, tlsL    net.Listener
	tlsUp, plainUp *httptest.Server
	mu             sync.Mutex
	seen           []string
	refuse         netip.Addr
}

func newWorld(t *testing.T) *world {
	w := &world{}
	record := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		w.seen = append(w.seen, r.Header.Get("Authorization"))
		w.mu.Unlock()
		_, _ = io.WriteString(rw, "up:"+r.Host)
	})
	w.tlsUp, w.plainUp = httptest.NewTLSServer(record), httptest.NewServer(record)
	t.Cleanup(w.tlsUp.Close)
	t.Cleanup(w.plainUp.Close)
	roots := x509.NewCertPool()
	roots.AddCert(w.tlsUp.Certificate())
	tlsPort := w.tlsUp.Listener.Addr().(*net.TCPAddr).Port
	p, err := New(Config{Name: "test", RootCAs: roots,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == "nowhere.test" {
				return nil, errors.New("NXDOMAIN")
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		Permit: func(host string, a netip.Addr) error {
			if host == "closed.test" {
				return errors.New("closed to this sandbox")
			}
			return nil
		},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if strings.HasSuffix(addr, ":443") { // the TLS upstream stands for every name's 443
				addr = net.JoinHostPort("127.0.0.1", itoa(tlsPort))
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	w.p = p
	if w.httpL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if w.tlsL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p.Serve(w.httpL, w.tlsL)
	t.Cleanup(func() { _ = p.Close() })
	return w
}

func itoa(n int) string { return strconv.Itoa(n) }

// client is the VM: every connection goes to the proxy (as its
// resolver's answer sends it), HTTPS trusting only the proxy's CA plus
// the upstream's own certificate (for names passed through).
func (w *world) client(t *testing.T) *http.Client {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(w.p.CACertPEM()) {
		t.Fatal("the CA's PEM does not parse")
	}
	roots.AddCert(w.tlsUp.Certificate())
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to := w.httpL.Addr().String()
			if strings.HasSuffix(addr, ":443") {
				to = w.tlsL.Addr().String()
			}
			return (&net.Dialer{}).DialContext(ctx, network, to)
		}}}
}

func (w *world) get(t *testing.T, c *http.Client, u string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (w *world) lastSeen() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 {
		return "<none>"
	}
	return w.seen[len(w.seen)-1]
}

func rules(domain, value string) []sandlotv1.EgressRule {
	return []sandlotv1.EgressRule{{Domain: domain, Headers: []sandlotv1.HeaderTransform{{Name: "Authorization", Value: value}}}}
}

func TestHeadersInjectedOverHTTPSAndHTTP(t *testing.T) {
	w := newWorld(t)
	c := w.client(t)
	if err := w.p.SetRules(append(rules("example.com", "Bearer ${e2b.secrets.key}"), rules("plain.test", "Token ${e2b.secrets.key}!")...),
		map[string]string{"key": "s3cret"}); err != nil {
		t.Fatal(err)
	}
	code, body := w.get(t, c, "https://example.com/x", "Authorization", "Bearer guest-supplied")
	if code != 200 || body != "up:example.com" || w.lastSeen() != "Bearer s3cret" {
		t.Fatalf("https: %d %q, upstream saw %q", code, body, w.lastSeen())
	}
	plain := "http://plain.test:" + itoa(w.plainUp.Listener.Addr().(*net.TCPAddr).Port) + "/"
	if code, _ := w.get(t, c, plain); code != 200 || w.lastSeen() != "Token s3cret!" {
		t.Fatalf("http: %d, upstream saw %q", code, w.lastSeen())
	}
	// Live: the same client (its connection kept alive) sees the new value.
	if err := w.p.SetRules(rules("example.com", "Bearer ${e2b.secrets.key}"), map[string]string{"key": "rotated"}); err != nil {
		t.Fatal(err)
	}
	if code, _ := w.get(t, c, "https://example.com/"); code != 200 || w.lastSeen() != "Bearer rotated" {
		t.Fatalf("after SetRules: %d, upstream saw %q", code, w.lastSeen())
	}
	// plain.test lost its rule: forwarded, its header the sandbox's own.
	if code, _ := w.get(t, c, plain, "Authorization", "mine"); code != 200 || w.lastSeen() != "mine" {
		t.Fatalf("no rule: %d, upstream saw %q", code, w.lastSeen())
	}
}

func TestRefusals(t *testing.T) {
	w := newWorld(t)
	c := w.client(t)
	if err := w.p.SetRules(append(rules("example.com", "${e2b.secrets.gone}"), rules("closed.test", "x")...), nil); !errors.Is(err, ErrMissingSecret) {
		t.Fatalf("SetRules with a missing key: %v", err)
	}
	before := len(w.seen)
	if code, body := w.get(t, c, "https://example.com/"); code != http.StatusBadGateway || !strings.Contains(body, `"gone"`) {
		t.Fatalf("missing secret: %d %q", code, body)
	}
	if len(w.seen) != before {
		t.Fatal("a request whose secret is missing reached the upstream")
	}
	// A Host other than the TLS's name on a terminated connection.
	req, _ := http.NewRequest(http.MethodGet, "https://example.com/", nil)
	req.Host = "evil.test"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("Host != SNI: %d", resp.StatusCode)
	}
	// The sandbox's policy holds for what the proxy dials.
	if code, body := w.get(t, c, "http://closed.test/"); code != http.StatusBadGateway || !strings.Contains(body, "closed to this sandbox") {
		t.Fatalf("closed upstream: %d %q", code, body)
	}
}

func TestOtherNamesPassThrough(t *testing.T) {
	w := newWorld(t)
	c := w.client(t)
	// No rule for example.com: its TLS reaches the upstream untouched
	// (the certificate the client verifies is the upstream's).
	if code, _ := w.get(t, c, "https://example.com/", "Authorization", "own"); code != 200 || w.lastSeen() != "own" {
		t.Fatalf("pass-through: %d, upstream saw %q", code, w.lastSeen())
	}
	req, _ := http.NewRequest(http.MethodGet, "https://nowhere.test/", nil)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a name that does not resolve was reached")
	}
}

func TestCAIsItsOwn(t *testing.T) {
	a, err := newAuthority("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newAuthority("b")
	if err != nil {
		t.Fatal(err)
	}
	if !a.cert.IsCA || !a.cert.MaxPathLenZero || a.cert.KeyUsage&x509.KeyUsageCertSign == 0 || !a.cert.BasicConstraintsValid {
		t.Fatalf("CA constraints: %+v", a.cert)
	}
	leaf, err := a.leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ca   *authority
		want bool
	}{{a, true}, {b, false}} {
		roots := x509.NewCertPool()
		roots.AddCert(c.ca.cert)
		_, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api.example.com"})
		if (err == nil) != c.want {
			t.Errorf("leaf of a under %s's CA: %v", c.ca.cert.Subject.CommonName, err)
		}
	}
}

func TestWildcardRules(t *testing.T) {
	p, err := New(Config{Resolve: func(context.Context, string) ([]netip.Addr, error) { return nil, nil },
		Permit: func(string, netip.Addr) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.SetRules(append(append(rules("*.example.com", "wild"), rules("*.api.example.com", "longer")...),
		rules("api.example.com", "exact")...), nil)
	for host, want := range map[string]string{"api.example.com": "exact", "v1.api.example.com": "longer",
		"a.b.example.com": "wild", "EXAMPLE.com.": "", "example.org": "", "x.api.example.com:443": "longer"} {
		got := ""
		if r := p.ruleFor(host); r != nil {
			got = r.headers[0][1]
		}
		if got != want {
			t.Errorf("rule of %s = %q, want %q", host, got, want)
		}
	}
}

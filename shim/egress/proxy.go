// Package egress is a sandbox's egress proxy: E2B's network.rules. The
// VM's resolver answers a rule's domain with the proxy's address (on the
// pod's tap, in its network namespace); the proxy sets the rule's
// headers — secrets substituted here, never in the guest — on each HTTP
// request, and on each HTTPS request after terminating TLS with a
// certificate from a CA made for this VM alone, and sends the request to
// the domain itself: resolved by the proxy, checked against the
// sandbox's policy, its certificate verified. TLS to any other name
// passes through untouched; plain HTTP to any other host goes on
// without a header added.
package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Config is what a Proxy needs of its shim.
type Config struct {
	// Name labels the CA (the pod's).
	Name string
	// Resolve gives a host's IPv4 addresses (the sandbox's resolvers).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Permit refuses an address the VM could not open a connection to
	// itself (host is the name it was resolved for, "" for a literal).
	Permit func(host string, a netip.Addr) error
	// RootCAs verify upstreams (nil: the system's).
	RootCAs *x509.CertPool
	// Dial opens upstream connections (nil: a net.Dialer, from the
	// node's network namespace).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logf reports what a request cannot say (nil: nothing).
	Logf func(format string, args ...any)

	// The tunnel (ServeTunnel) and the upstream proxy: OriginalDst is
	// where a redirected connection was going; Learned names an address
	// a domain of the sandbox's allowOut answered; ResolveProxy resolves
	// the proxy's host and PermitProxy refuses a proxy address the
	// platform denies (nil: none of them in use).
	OriginalDst  func(net.Conn) (netip.AddrPort, error)
	Learned      func(netip.Addr) (string, bool)
	ResolveProxy func(ctx context.Context, host string) ([]netip.Addr, error)
	PermitProxy  func(netip.Addr) error
}

// Limits: connections the VM may hold open through the proxy, and how
// long it may take to say where it goes.
const (
	maxConns     = 256
	helloTimeout = 10 * time.Second
	dialTimeout  = 10 * time.Second
	idleTimeout  = 5 * time.Minute
)

// Proxy serves one VM.
type Proxy struct {
	cfg   Config
	ca    *authority
	rules atomic.Pointer[ruleSet]
	tr    *http.Transport
	slots chan struct{}
	// upstream is the SOCKS5 proxy upstream connections go through.
	upstream atomic.Pointer[UpstreamProxy]

	mu      sync.Mutex
	closers []func() error
	wg      sync.WaitGroup
}

// New makes the proxy and its CA; it serves nothing until Serve.
func New(cfg Config) (*Proxy, error) {
	if cfg.Resolve == nil || cfg.Permit == nil {
		return nil, errors.New("egress: Resolve and Permit are required")
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{Timeout: dialTimeout}).DialContext
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	ca, err := newAuthority(cfg.Name)
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, ca: ca, slots: make(chan struct{}, maxConns)}
	p.tr = p.transport()
	p.rules.Store(&ruleSet{})
	return p, nil
}

// CACertPEM is the certificate the guest must trust (public; the key
// stays in this process).
func (p *Proxy) CACertPEM() []byte { return p.ca.pem }

// ruleSet is the rules with their secrets substituted.
type ruleSet struct {
	match    sandlotv1.NetworkRules // finds a host's rule (exact, then wildcard)
	byDomain map[string]*rule
}

type rule struct {
	headers [][2]string
	// broken says why the rule cannot be applied (a secret missing):
	// its requests are refused rather than sent without the header.
	broken string
}

// ErrMissingSecret: a rule names a key its Secret does not (yet) hold.
var ErrMissingSecret = errors.New("secret not available")

// SetRules replaces the rules, live: requests from now on see the new
// ones, also on connections already open. secrets are the values of the
// placeholders' keys. A rule whose key is missing is kept and refuses
// its requests (a request without its credential is not what the rule
// asked for); the error names the keys.
func (p *Proxy) SetRules(rules []sandlotv1.EgressRule, secrets map[string]string) error {
	rs := &ruleSet{match: sandlotv1.NetworkRules{Egress: rules}, byDomain: map[string]*rule{}}
	var missing []string
	for _, r := range rules {
		out := &rule{}
		for _, h := range r.Headers {
			v := sandlotv1.SecretPlaceholder.ReplaceAllStringFunc(h.Value, func(m string) string {
				key := sandlotv1.SecretPlaceholder.FindStringSubmatch(m)[1]
				val, ok := secrets[key]
				if !ok {
					missing = append(missing, key)
					out.broken = fmt.Sprintf("the secret %q its rule names is not available to the node", key)
				}
				return val
			})
			out.headers = append(out.headers, [2]string{h.Name, v})
		}
		rs.byDomain[r.Domain] = out
	}
	p.rules.Store(rs)
	if len(missing) > 0 {
		return fmt.Errorf("%w: keys %s", ErrMissingSecret, strings.Join(missing, ", "))
	}
	return nil
}

// ruleFor is the rule of host (a name as a request gives it), or nil.
func (p *Proxy) ruleFor(host string) *rule {
	rs := p.rules.Load()
	if r := rs.match.RuleFor(normalHost(host)); r != nil {
		return rs.byDomain[r.Domain]
	}
	return nil
}

// Domains matches the names the resolver sends to the proxy.
func (p *Proxy) Domains(name string) bool { return p.ruleFor(name) != nil }

// normalHost is host without a port or trailing dot, lower case.
func normalHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// Close stops serving and waits for the connections to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	closers := p.closers
	p.closers = nil
	p.mu.Unlock()
	var errs []error
	for _, c := range closers {
		errs = append(errs, c())
	}
	p.tr.CloseIdleConnections()
	p.wg.Wait()
	return errors.Join(errs...)
}

func (p *Proxy) onClose(f func() error) {
	p.mu.Lock()
	p.closers = append(p.closers, f)
	p.mu.Unlock()
}

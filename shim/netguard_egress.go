package shim

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/runtime-spec/specs-go"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/shim/egress"
	"github.com/sandlot-dev/sandlot/shim/podnet"
)

// egressState is what the egress proxy checks a dial against: the
// policy the pod's filter enforces and the sandbox's rules.
type egressState struct {
	policy podnet.Policy
	rules  sandlotv1.NetworkRules
}

// egressSecretsOf is the host directory where the kubelet keeps the
// Secret the sandbox's header rules name (the container spec's mount
// at EgressSecretsPath), "" without one. The guest never gets it.
func egressSecretsOf(spec *specs.Spec) string {
	for _, m := range spec.Mounts {
		if m.Destination == sandlotv1.EgressSecretsPath {
			return m.Source
		}
	}
	return ""
}

// upstreamRoots are the system's roots and the operator's extra ones
// (network.upstreamCAFile) the proxy verifies upstreams with.
func upstreamRoots(file string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if file == "" {
		return pool, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("network.upstreamCAFile: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("network.upstreamCAFile %s: no PEM certificate", file)
	}
	return pool, nil
}

// serveEgress starts the pod's egress proxy on the resolver's address
// (ports 80 and 443 in the pod's netns; upstreams dialled from the
// node's), its names sent there by the resolver.
func (g *guard) serveEgress(netns, name string, spec guardSpec) error {
	roots, err := upstreamRoots(spec.Defaults.UpstreamCAFile)
	if err != nil {
		return err
	}
	p, err := egress.New(egress.Config{Name: name, RootCAs: roots, Resolve: g.fwd.LookupA, Permit: g.permit,
		Logf:         func(f string, a ...any) { logf(context.Background(), f, a...) },
		OriginalDst:  originalDst,
		Learned:      g.names.lookup,
		ResolveProxy: g.fwd.LookupAnyA,
		PermitProxy:  g.permitProxy})
	if err != nil {
		return err
	}
	ls, err := listenEgress(netns)
	if err != nil {
		return err
	}
	p.Serve(ls[0], ls[1])
	p.ServeTunnel(ls[2])
	g.proxy, g.secretsDir = p, spec.EgressSecrets
	g.closers = append([]func() error{p.Close}, g.closers...)
	g.fwd.SetIntercept(p.Domains, resolverAddr)
	return nil
}

// listenEgress opens the proxy's listeners in the pod's netns on the
// resolver's address: HTTP, TLS and the tunnel.
func listenEgress(netns string) ([]net.Listener, error) {
	var ls []net.Listener
	err := podnet.Run(netns, func() error {
		for _, port := range []int{podnet.EgressHTTPPort, podnet.EgressTLSPort, podnet.TunnelPort} {
			l, err := net.Listen("tcp4", net.JoinHostPort(resolverAddr.String(), strconv.Itoa(port)))
			if err != nil {
				return err
			}
			ls = append(ls, l)
		}
		return nil
	})
	if err != nil {
		for _, l := range ls {
			l.Close()
		}
		return nil, fmt.Errorf("listen for the VM's egress proxy on %s: %w", resolverAddr, err)
	}
	return ls, nil
}

func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	return podnet.OriginalDst(tc)
}

// permitProxy refuses an egress proxy address the platform denies
// (the node itself, the platform's denials not opened): the sandbox's
// own rules are for its destinations, the proxy is the operator's road.
func (g *guard) permitProxy(a netip.Addr) error {
	if !g.base.Permits(a, false) {
		return fmt.Errorf("egress proxy address %s is one the platform denies", a)
	}
	return nil
}

// permit refuses what the VM's own connection would be refused.
func (g *guard) permit(host string, a netip.Addr) error {
	st := g.state.Load()
	if st == nil {
		return errors.New("no policy yet")
	}
	named := host != "" && st.rules.MatchDomain(host)
	if !st.policy.Permits(a, named) {
		return fmt.Errorf("%s (%s) is closed to this sandbox", a, host)
	}
	return nil
}

// applyEgress gives the proxy the rules with their secrets, read now
// from the kubelet's copy of the Secret.
func (g *guard) applyEgress(rules sandlotv1.NetworkRules, n *sandlotv1.SandboxNetwork) error {
	if g.proxy == nil {
		if len(rules.Egress) > 0 || rules.Proxy != nil {
			return errors.New("network.rules and egressProxy: this pod has no resolver, so no egress proxy")
		}
		return nil
	}
	secrets, err := readEgressSecrets(g.secretsDir, rules.SecretName, n.SecretKeys())
	if err != nil {
		_ = g.proxy.SetRules(rules.Egress, nil) // fail closed: the rules' requests are refused
		g.proxy.SetUpstreamProxy(nil)           // and the tunnel's connections closed
		return err
	}
	if err := g.setUpstreamProxy(rules); err != nil {
		return err
	}
	return g.proxy.SetRules(rules.Egress, secrets)
}

// setUpstreamProxy gives the proxy the sandbox's SOCKS5 proxy, its
// password from the Secret's EgressProxyPasswordKey (absent: none). A
// password that cannot be read leaves no proxy: the tunnel fails closed.
func (g *guard) setUpstreamProxy(rules sandlotv1.NetworkRules) error {
	if rules.Proxy == nil {
		g.proxy.SetUpstreamProxy(nil)
		return nil
	}
	u := &egress.UpstreamProxy{Address: rules.Proxy.Address, Username: rules.Proxy.Username}
	if g.secretsDir != "" {
		b, err := os.ReadFile(filepath.Join(g.secretsDir, sandlotv1.EgressProxyPasswordKey))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			g.proxy.SetUpstreamProxy(nil)
			return fmt.Errorf("read the egress proxy's password: %w", err)
		}
		u.Password = string(b)
	}
	g.proxy.SetUpstreamProxy(u)
	return nil
}

// readEgressSecrets reads keys from the Secret's mount. A missing key is
// ErrMissingSecret (the kubelet may not have its update yet: the agent
// tries again).
func readEgressSecrets(dir, secret string, keys []string) (map[string]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if dir == "" {
		return nil, fmt.Errorf("%w: the pod mounts no Secret for network.rules (network.secretName %q is set when a sandbox is created)",
			egress.ErrMissingSecret, secret)
	}
	out := map[string]string{}
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: Secret %s has no key %q (yet)", egress.ErrMissingSecret, secret, k)
		}
		if err != nil {
			return nil, fmt.Errorf("read key %q of Secret %s: %w", k, secret, err)
		}
		out[k] = string(b)
	}
	return out, nil
}

// EgressCA is the certificate of the pod's egress proxy CA (nil: none).
func (g *guard) EgressCA() []byte {
	if g.proxy == nil {
		return nil
	}
	return g.proxy.CACertPEM()
}

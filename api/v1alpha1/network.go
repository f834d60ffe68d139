package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// Pod annotations of a sandbox's network rules.
const (
	// AnnotationNetwork is the sandbox's SandboxNetwork (JSON), set by the
	// controller from spec.network; the node agent applies each change.
	AnnotationNetwork = "sandlot.dev/network"
	// AnnotationNetworkApplied is set by the node agent to the value of
	// AnnotationNetwork the shim enforces.
	AnnotationNetworkApplied = "sandlot.dev/network-applied"
)

// MaxNetworkEntries bounds allowOut and denyOut (the CRD's MaxItems).
const MaxNetworkEntries = 256

// NetworkRules is a SandboxNetwork parsed: what the shim enforces.
// +kubebuilder:object:generate=false
type NetworkRules struct {
	AllowCIDRs []netip.Prefix
	// AllowDomains are lower-case names; "*.example.com" matches the
	// subdomains of example.com (not example.com itself), as in E2B.
	AllowDomains []string
	DenyCIDRs    []netip.Prefix
	// Ingress opens the sandbox to new connections from anywhere.
	Ingress bool
	// Egress are the header rules, by domain; SecretName the Secret
	// their placeholders name.
	Egress     []EgressRule
	SecretName string
	// Proxy is the SOCKS5 proxy TCP leaves through (nil: none).
	Proxy *EgressProxy
}

// AllTraffic is 0.0.0.0/0: what allowInternetAccess false denies.
var AllTraffic = netip.MustParsePrefix("0.0.0.0/0")

var domainName = regexp.MustCompile(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$`)

// ParseNetwork checks a SandboxNetwork (nil: no rules); an error names
// the field and entry at fault.
func ParseNetwork(n *SandboxNetwork) (NetworkRules, error) {
	var r NetworkRules
	if n == nil {
		return r, nil
	}
	var errs []error
	if len(n.AllowOut) > MaxNetworkEntries || len(n.DenyOut) > MaxNetworkEntries {
		errs = append(errs, fmt.Errorf("network: at most %d allowOut and %d denyOut entries", MaxNetworkEntries, MaxNetworkEntries))
	}
	for _, e := range n.AllowOut {
		if p, err := parseCIDROrIP(e); err == nil {
			r.AllowCIDRs = append(r.AllowCIDRs, p)
			continue
		} else if strings.Contains(e, "/") {
			errs = append(errs, fmt.Errorf("network.allowOut: %w", err))
			continue
		}
		d := strings.TrimSuffix(strings.ToLower(e), ".")
		if len(d) > 253 || !domainName.MatchString(d) || !strings.ContainsAny(d, "abcdefghijklmnopqrstuvwxyz") {
			errs = append(errs, fmt.Errorf("network.allowOut: %q is neither a CIDR, an IPv4 address nor a domain", e))
			continue
		}
		r.AllowDomains = append(r.AllowDomains, d)
	}
	for _, e := range n.DenyOut {
		p, err := parseCIDROrIP(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("network.denyOut: %w (domains cannot be denied)", err))
			continue
		}
		r.DenyCIDRs = append(r.DenyCIDRs, p)
	}
	if n.AllowInternetAccess != nil && !*n.AllowInternetAccess {
		r.DenyCIDRs = append(r.DenyCIDRs, AllTraffic)
	}
	r.Ingress = n.Ingress
	errs = append(errs, checkEgress(n)...)
	r.Egress, r.SecretName, r.Proxy = n.Rules, n.SecretName, n.EgressProxy
	return r, errors.Join(errs...)
}

// parseCIDROrIP takes an IPv4 CIDR or address (sandboxes have IPv4 only);
// a CIDR with host bits set is refused rather than silently widened.
func parseCIDROrIP(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return netip.Prefix{}, fmt.Errorf("%q is not an IPv4 CIDR", s)
		}
		if p.Masked() != p {
			return netip.Prefix{}, fmt.Errorf("%q has host bits set (did you mean %s?)", s, p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Prefix{}, fmt.Errorf("%q is not an IPv4 address", s)
	}
	return netip.PrefixFrom(a, 32), nil
}

// MatchDomain reports whether name (as asked of a resolver) is opened by
// one of the rules' domains.
func (r NetworkRules) MatchDomain(name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, d := range r.AllowDomains {
		if sub, ok := strings.CutPrefix(d, "*."); ok {
			if strings.HasSuffix(name, "."+sub) {
				return true
			}
		} else if name == d {
			return true
		}
	}
	return false
}

// EncodeNetwork renders a SandboxNetwork as AnnotationNetwork's value
// ("" for none).
func EncodeNetwork(n *SandboxNetwork) (string, error) {
	if n == nil {
		return "", nil
	}
	if _, err := ParseNetwork(n); err != nil {
		return "", err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return "", fmt.Errorf("encode network: %w", err)
	}
	return string(b), nil
}

// DecodeNetwork parses AnnotationNetwork's value ("" is none); unknown
// fields are refused, so a rule the shim cannot enforce never passes.
func DecodeNetwork(v string) (*SandboxNetwork, NetworkRules, error) {
	if v == "" {
		return nil, NetworkRules{}, nil
	}
	n := &SandboxNetwork{}
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(n); err != nil {
		return nil, NetworkRules{}, fmt.Errorf("annotation %s: %w", AnnotationNetwork, err)
	}
	r, err := ParseNetwork(n)
	if err != nil {
		return nil, NetworkRules{}, fmt.Errorf("annotation %s: %w", AnnotationNetwork, err)
	}
	return n, r, nil
}

// EgressClosed reports whether the rules deny every destination
// allowOut does not name (allowInternetAccess false, or a denyOut of
// 0.0.0.0/0).
func (r NetworkRules) EgressClosed() bool {
	for _, p := range r.DenyCIDRs {
		if p.Bits() == 0 {
			return true
		}
	}
	return false
}

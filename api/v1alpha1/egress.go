package v1alpha1

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// E2B's limits on network.rules (its API's validateNetworkRules), and
// sandlot's bound on their encoded size: they travel in a pod annotation.
const (
	MaxEgressRules          = 10
	MaxEgressHeaders        = 20
	MaxEgressHeaderName     = 64
	MaxEgressHeaderValue    = 2048
	MaxEgressSecretsPerRule = 32
	MaxEgressRulesBytes     = 64 << 10
)

// EgressSecretsPath is where a sandbox container's spec mounts
// spec.network.secretName: the shim finds the kubelet's copy there.
const EgressSecretsPath = "/run/sandlot/egress-secrets"

// EgressProxyPasswordKey is the key of spec.network.secretName that holds
// the egress proxy's password (a dot: no E2B secret name has one).
const EgressProxyPasswordKey = "egress-proxy.password"

// SecretPlaceholder matches ${e2b.secrets.KEY} in a header value; KEY is
// a key of spec.network.secretName (a Secret's key alphabet).
var SecretPlaceholder = regexp.MustCompile(`\$\{e2b\.secrets\.([-._a-zA-Z0-9]{1,253})\}`)

// headerToken is RFC 9110's token: what a header name may be.
var headerToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// ruleDomain is a DNS name, lower case, or "*." and one (its subdomains
// at any depth, not itself).
var ruleDomain = regexp.MustCompile(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// refusedHeaders are the headers a rule may not set: they frame the
// request or its connection, and the proxy owns them.
var refusedHeaders = map[string]bool{"host": true, "content-length": true, "transfer-encoding": true,
	"connection": true, "upgrade": true, "keep-alive": true, "te": true, "trailer": true,
	"proxy-connection": true, "proxy-authorization": true, "proxy-authenticate": true}

// checkEgress refuses rules the proxy would not apply as written; each
// error names the field and the entry.
func checkEgress(n *SandboxNetwork) []error {
	var errs []error
	if len(n.Rules) > MaxEgressRules {
		errs = append(errs, fmt.Errorf("network.rules: %d domains, at most %d", len(n.Rules), MaxEgressRules))
	}
	seen := map[string]bool{}
	for _, r := range n.Rules {
		errs = append(errs, checkEgressRule(r, seen)...)
		if n.SecretName == "" && ruleUsesSecrets(r) {
			errs = append(errs, fmt.Errorf("network.rules[%s]: a ${e2b.secrets.*} placeholder needs network.secretName", r.Domain))
		}
	}
	if p := n.EgressProxy; p != nil {
		if err := checkEgressProxy(p); err != nil {
			errs = append(errs, err)
		}
	}
	if b, err := json.Marshal(n.Rules); err == nil && len(b) > MaxEgressRulesBytes {
		errs = append(errs, fmt.Errorf("network.rules: %d bytes encoded, at most %d", len(b), MaxEgressRulesBytes))
	}
	return errs
}

func checkEgressRule(r EgressRule, seen map[string]bool) []error {
	var errs []error
	at := fmt.Sprintf("network.rules[%s]", r.Domain)
	if _, err := netip.ParseAddr(r.Domain); err == nil || !ruleDomain.MatchString(r.Domain) || len(r.Domain) > 253 {
		errs = append(errs, fmt.Errorf("%s: the domain must be a lower-case DNS name or *. and one (no IP or CIDR: the proxy is found by name)", at))
	}
	if seen[r.Domain] {
		errs = append(errs, fmt.Errorf("%s: one rule per domain", at))
	}
	seen[r.Domain] = true
	if len(r.Headers) == 0 || len(r.Headers) > MaxEgressHeaders {
		errs = append(errs, fmt.Errorf("%s: %d headers, want 1 to %d", at, len(r.Headers), MaxEgressHeaders))
	}
	secrets := 0
	for _, h := range r.Headers {
		secrets += len(SecretPlaceholder.FindAllString(h.Value, -1))
		if err := checkHeader(h); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
		}
	}
	if secrets > MaxEgressSecretsPerRule {
		errs = append(errs, fmt.Errorf("%s: %d secret placeholders, at most %d", at, secrets, MaxEgressSecretsPerRule))
	}
	return errs
}

// checkHeader refuses a name that is no token or one the proxy owns, and
// a value that could end the header or names a placeholder sandlot does
// not resolve.
func checkHeader(h HeaderTransform) error {
	switch {
	case len(h.Name) == 0 || len(h.Name) > MaxEgressHeaderName || !headerToken.MatchString(h.Name):
		return fmt.Errorf("header %q: a name is 1 to %d token characters", h.Name, MaxEgressHeaderName)
	case refusedHeaders[strings.ToLower(h.Name)]:
		return fmt.Errorf("header %q is the proxy's own and cannot be set", h.Name)
	case len(h.Value) > MaxEgressHeaderValue:
		return fmt.Errorf("header %q: value of %d bytes, at most %d", h.Name, len(h.Value), MaxEgressHeaderValue)
	case strings.ContainsAny(h.Value, "\r\n\x00"):
		return fmt.Errorf("header %q: the value holds CR, LF or NUL", h.Name)
	}
	rest := SecretPlaceholder.ReplaceAllString(h.Value, "")
	if strings.Contains(rest, "${e2b.identity.") {
		return fmt.Errorf("header %q: ${e2b.identity.*} placeholders (IAM tokens) are not supported by sandlot", h.Name)
	}
	if strings.Contains(rest, "${e2b.") {
		return fmt.Errorf("header %q: an ${e2b.*} placeholder other than ${e2b.secrets.KEY}", h.Name)
	}
	return nil
}

func ruleUsesSecrets(r EgressRule) bool {
	for _, h := range r.Headers {
		if SecretPlaceholder.MatchString(h.Value) {
			return true
		}
	}
	return false
}

// SecretKeys are the keys of spec.network.secretName the rules name.
func (n *SandboxNetwork) SecretKeys() []string {
	var keys []string
	seen := map[string]bool{}
	if n == nil {
		return nil
	}
	for _, r := range n.Rules {
		for _, h := range r.Headers {
			for _, m := range SecretPlaceholder.FindAllStringSubmatch(h.Value, -1) {
				if !seen[m[1]] {
					seen[m[1]] = true
					keys = append(keys, m[1])
				}
			}
		}
	}
	return keys
}

// RuleFor is the rule of host (lower case, no port or trailing dot), or
// nil: an exact domain first, then the longest "*." suffix, as E2B
// matches them (never merged).
func (r NetworkRules) RuleFor(host string) *EgressRule {
	best := -1
	for i := range r.Egress {
		d := r.Egress[i].Domain
		if d == host {
			return &r.Egress[i]
		}
		if sub, ok := strings.CutPrefix(d, "*."); ok && strings.HasSuffix(host, "."+sub) &&
			(best < 0 || len(d) > len(r.Egress[best].Domain)) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	return &r.Egress[best]
}

// checkEgressProxy: a host:port, the host a DNS name or an IPv4 address.
func checkEgressProxy(p *EgressProxy) error {
	host, port, err := net.SplitHostPort(p.Address)
	if err != nil {
		return fmt.Errorf("network.egressProxy.address: %q is not host:port", p.Address)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("network.egressProxy.address: %q has no valid port", p.Address)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if !a.Is4() {
			return fmt.Errorf("network.egressProxy.address: %q is not IPv4 (sandboxes have IPv4 only)", p.Address)
		}
	} else if len(host) > 253 || !ruleDomain.MatchString(strings.ToLower(host)) || strings.HasPrefix(host, "*") {
		return fmt.Errorf("network.egressProxy.address: the host of %q is neither a DNS name nor an IPv4 address", p.Address)
	}
	if len(p.Username) > 255 {
		return fmt.Errorf("network.egressProxy.username: %d bytes, at most 255", len(p.Username))
	}
	return nil
}

// Proxy is n's egress proxy (nil for none or no network).
func (n *SandboxNetwork) Proxy() *EgressProxy {
	if n == nil {
		return nil
	}
	return n.EgressProxy
}

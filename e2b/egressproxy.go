package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// E2B's egressProxy (a SOCKS5 proxy the sandbox's TCP is tunnelled
// through, on the node) maps onto spec.network.egressProxy; its password
// goes into the sandbox's own Secret (spec.network.secretName, key
// EgressProxyPasswordKey) with the rules' secrets, never into the spec.

// egressProxyJSON is E2B's SandboxEgressProxyConfig.
type egressProxyJSON struct {
	Address  string `json:"address"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// egressProxyInfo is what the info route shows (no password).
type egressProxyInfo struct {
	Address  string `json:"address"`
	Username string `json:"username,omitempty"`
}

// parseEgressProxy is the request's egressProxy (nil: none), its
// password apart, or why it is refused.
func parseEgressProxy(prefix string, raw json.RawMessage) (*sandlotv1.EgressProxy, string, *apiError) {
	if !setNonEmpty(raw) {
		return nil, "", nil
	}
	var in egressProxyJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, "", errorf(http.StatusBadRequest, "field %q: %v", prefix+"egressProxy", err)
	}
	switch {
	case in.Address == "":
		return nil, "", errorf(http.StatusBadRequest, "field %q is required", prefix+"egressProxy.address")
	case len(in.Password) > 255:
		return nil, "", errorf(http.StatusBadRequest, "field %q: at most 255 bytes", prefix+"egressProxy.password")
	case in.Password != "" && in.Username == "":
		return nil, "", errorf(http.StatusBadRequest, "field %q: a password needs a username", prefix+"egressProxy.password")
	}
	return &sandlotv1.EgressProxy{Address: in.Address, Username: in.Username}, in.Password, nil
}

// proxyRefusal refuses a proxy address that does not resolve or names an
// address the platform denies to every sandbox (E2B refuses internal
// addresses before the sandbox exists). The node checks again at each
// connection: a name may resolve elsewhere later.
func (s *Server) proxyRefusal(ctx context.Context, prefix string, p *sandlotv1.EgressProxy) *apiError {
	if p == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(p.Address)
	if err != nil {
		return errorf(http.StatusBadRequest, "field %q: %q is not host:port", prefix+"egressProxy.address", p.Address)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip4", host); err != nil || len(addrs) == 0 {
		return errorf(http.StatusBadRequest, "field %q: %s does not resolve", prefix+"egressProxy.address", host)
	}
	for _, a := range addrs {
		if err := s.cfg.Egress.Refusal([]netip.Prefix{netip.PrefixFrom(a.Unmap(), 32)}); err != nil {
			return errorf(http.StatusBadRequest, "field %q: %v", prefix+"egressProxy.address", err)
		}
	}
	return nil
}

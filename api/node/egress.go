package node

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Egress is the platform's outbound policy, which every sandbox's own
// rules sit under: Deny is closed to every sandbox whatever its allowOut
// or its resolver's answers say, except inside Open, where a sandbox's
// allowOut may open what it names. The node's shims enforce it; the API
// and the admission policy refuse a rule that asks to open a denied range.
type Egress struct {
	Deny []netip.Prefix
	Open []netip.Prefix
}

// Egress parses DenyOut (nil: DefaultDenyOut) and OpenOut; every OpenOut
// range must lie inside a DenyOut range (elsewhere it opens nothing).
func (n NetworkConfig) Egress() (Egress, error) {
	denyOut := n.DenyOut
	if denyOut == nil {
		denyOut = DefaultDenyOut
	}
	deny, err := ParsePrefixes("network.denyOut", denyOut)
	if err != nil {
		return Egress{}, err
	}
	open, err := ParsePrefixes("network.openOut", n.OpenOut)
	if err != nil {
		return Egress{}, err
	}
	e := Egress{Deny: deny, Open: open}
	for _, o := range open {
		if _, denied := e.deniedBy(o); !denied {
			return Egress{}, fmt.Errorf("network.openOut %q: not inside a network.denyOut range (only denied ranges need opening)", o)
		}
	}
	return e, nil
}

// deniedBy is the Deny range p lies in.
func (e Egress) deniedBy(p netip.Prefix) (netip.Prefix, bool) {
	for _, d := range e.Deny {
		if within(p, d) {
			return d, true
		}
	}
	return netip.Prefix{}, false
}

// Refusal explains why a sandbox's allowOut CIDRs ask for what the
// platform denies (nil: they do not). A CIDR inside a denied range is
// refused: it could never open. One wider than a denied range is
// accepted; the denied part stays closed.
func (e Egress) Refusal(allow []netip.Prefix) error {
	var errs []string
	for _, a := range allow {
		d, denied := e.deniedBy(a)
		if !denied || e.Opens(a) {
			continue
		}
		errs = append(errs, fmt.Sprintf("%s is inside %s, which the platform denies to every sandbox", addrOrCIDR(a), d))
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; ") + " (the operator opens ranges with the chart's network.openOut)")
}

// Opens reports whether an allowOut naming p opens it despite Deny.
func (e Egress) Opens(p netip.Prefix) bool {
	for _, o := range e.Open {
		if within(p, o) {
			return true
		}
	}
	return false
}

// within reports whether p lies inside outer.
func within(p, outer netip.Prefix) bool {
	return outer.Bits() <= p.Bits() && outer.Contains(p.Addr())
}

func addrOrCIDR(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

package podnet

import (
	"net/netip"
	"slices"
)

// Permits reports whether the VM's filter would let a new connection to
// a through, named is whether it is the address of a domain the
// sandbox's allowOut names (a learned answer): the same order as the
// from_vm chain, for the egress proxy, which opens connections for the
// VM from the node and must refuse what the VM could not reach itself.
func (p Policy) Permits(a netip.Addr, named bool) bool {
	in := func(ps []netip.Prefix) bool {
		return slices.ContainsFunc(ps, func(q netip.Prefix) bool { return q.Contains(a) })
	}
	opened := in(p.AllowOut) || named
	switch {
	case !a.Is4() || in(p.Blocked):
		return false
	case in(p.Openable) && opened:
		return true
	case in(p.Platform):
		return false
	case opened:
		return true
	}
	return !in(p.DenyOut)
}

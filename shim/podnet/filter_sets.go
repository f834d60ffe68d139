package podnet

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// span is an inclusive range of IPv4 addresses as integers.
type span struct{ lo, hi uint64 }

// intervalElements turns prefixes into the elements of an interval set:
// merged first, because the kernel refuses overlapping intervals (and a
// user's 10.0.0.0/8 with 10.1.0.0/16 overlaps). An interval reaching
// 255.255.255.255 has no end element.
func intervalElements(prefixes []netip.Prefix) []nftables.SetElement {
	var spans []span
	for _, p := range prefixes {
		if !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		lo := uint64(u32(p.Addr()))
		spans = append(spans, span{lo, lo + (uint64(1) << (32 - p.Bits())) - 1})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	var merged []span
	for _, s := range spans {
		if n := len(merged); n > 0 && s.lo <= merged[n-1].hi+1 {
			merged[n-1].hi = max(merged[n-1].hi, s.hi)
			continue
		}
		merged = append(merged, s)
	}
	var els []nftables.SetElement
	for _, s := range merged {
		els = append(els, nftables.SetElement{Key: be32(s.lo)})
		if s.hi < 0xffffffff {
			els = append(els, nftables.SetElement{Key: be32(s.hi + 1), IntervalEnd: true})
		}
	}
	return els
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func be32(v uint64) []byte {
	return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

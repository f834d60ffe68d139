package podnet

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Small builders for the netdev rules in filter.go: each returns the
// expressions of one match or action, so a rule reads as a sentence.

// Registers: NFT_REG_1 is 16 bytes (the 32-bit registers 8..11), which a
// flow key (addr . proto . port . port, each padded to 4 bytes) fills.
const (
	reg1     = 1
	reg32_01 = 9
	reg32_02 = 10
	reg32_03 = 11
)

// Offsets in the headers the rules read.
const (
	ethSrc     = 6  // link layer: source MAC
	arpSHA     = 8  // ARP: sender hardware address
	arpSPA     = 14 // ARP: sender protocol address
	ipProto    = 9
	ipSrc      = 12
	ipDst      = 16
	ipFragOff  = 6
	thSrcPort  = 0
	thDstPort  = 2
	icmpTypeAt = 0
)

func load(base expr.PayloadBase, off, n uint32, reg uint32) expr.Any {
	return &expr.Payload{DestRegister: reg, Base: base, Offset: off, Len: n}
}

func eq(reg uint32, data []byte) expr.Any {
	return &expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: data}
}

func neq(reg uint32, data []byte) expr.Any {
	return &expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: data}
}

// etherType matches the frame's EtherType (meta protocol).
func etherType(t uint16, equal bool) []expr.Any {
	v := binaryutil.BigEndian.PutUint16(t)
	if equal {
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: reg1}, eq(reg1, v)}
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: reg1}, neq(reg1, v)}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1}, eq(reg1, []byte{p})}
}

// ipField compares 4 bytes of the IPv4 header at off with a.
func ipField(off uint32, a netip.Addr, equal bool) []expr.Any {
	b := a.As4()
	if equal {
		return []expr.Any{load(expr.PayloadBaseNetworkHeader, off, 4, reg1), eq(reg1, b[:])}
	}
	return []expr.Any{load(expr.PayloadBaseNetworkHeader, off, 4, reg1), neq(reg1, b[:])}
}

// inSet looks the IPv4 address at off up in s.
func inSet(off uint32, s *nftables.Set) []expr.Any {
	return []expr.Any{load(expr.PayloadBaseNetworkHeader, off, 4, reg1),
		&expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID}}
}

// flowKey loads remote address . protocol . remote port . local port:
// the VM's side is the local one in both directions, so a flow opened
// either way is one key. fromVM says which header fields are remote.
func flowKey(fromVM bool) []expr.Any {
	addr, rport, lport := uint32(ipSrc), uint32(thSrcPort), uint32(thDstPort)
	if fromVM {
		addr, rport, lport = ipDst, thDstPort, thSrcPort
	}
	return []expr.Any{
		load(expr.PayloadBaseNetworkHeader, addr, 4, reg1),
		load(expr.PayloadBaseNetworkHeader, ipProto, 1, reg32_01),
		load(expr.PayloadBaseTransportHeader, rport, 2, reg32_02),
		load(expr.PayloadBaseTransportHeader, lport, 2, reg32_03),
	}
}

func lookupFlow(s *nftables.Set) expr.Any {
	return &expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID}
}

// updateFlow adds the flow key to s or refreshes its timeout: an idle
// flow ages out as a conntrack entry would.
func updateFlow(s *nftables.Set, timeout time.Duration) expr.Any {
	return &expr.Dynset{SrcRegKey: reg1, SetName: s.Name, SetID: s.ID,
		Operation: uint32(unix.NFT_DYNSET_OP_UPDATE), Timeout: timeout}
}

// forward sends the frame out of ifindex and drops the original: the
// netdev "fwd" statement, spelt dup + drop (the library has no fwd).
func forward(ifindex int) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: reg1, Data: ifindexData(ifindex)},
		&expr.Dup{RegDev: reg1, IsRegDevSet: true},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// ifindexData is an interface index as a rule's data: in the kernel's
// own byte order, as it stores one.
func ifindexData(ifindex int) []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, uint32(ifindex))
	return b
}

func verdict(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }

func goTo(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: chain} }

func jump(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

// toHost marks the frame for this netns's own stack (its MAC was the
// gateway's, so the kernel took it for another host).
func toHost() []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: reg1, Data: []byte{unix.PACKET_HOST}},
		&expr.Meta{Key: expr.MetaKeyPKTTYPE, SourceRegister: true, Register: reg1},
		verdict(expr.VerdictAccept),
	}
}

// rejectTCP answers with a reset, rejectOther with ICMP admin-prohibited,
// so a denied connection fails at once instead of timing out.
func rejectTCP() expr.Any {
	return &expr.Reject{Type: unix.NFT_REJECT_TCP_RST}
}

func rejectOther() expr.Any {
	return &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(e ...expr.Any) []expr.Any { return e }

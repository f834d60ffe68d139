package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rtnl is a minimal rtnetlink client (requests with ack, and dumps).
type rtnl struct {
	fd  int
	seq uint32
	buf []byte
}

func dialRTNL() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	return &rtnl{fd: fd, buf: make([]byte, 64<<10)}, nil
}

func (r *rtnl) close() { unix.Close(r.fd) }

// do sends one request; for a dump it returns the payloads of the replies.
func (r *rtnl) do(typ, flags uint16, body []byte) ([][]byte, error) {
	r.seq++
	dump := flags&unix.NLM_F_DUMP == unix.NLM_F_DUMP
	flags |= unix.NLM_F_REQUEST
	if !dump {
		flags |= unix.NLM_F_ACK
	}
	msg := binary.NativeEndian.AppendUint32(nil, uint32(unix.SizeofNlMsghdr+len(body)))
	msg = binary.NativeEndian.AppendUint16(msg, typ)
	msg = binary.NativeEndian.AppendUint16(msg, flags)
	msg = binary.NativeEndian.AppendUint32(msg, r.seq)
	msg = binary.NativeEndian.AppendUint32(msg, 0)
	msg = append(msg, body...)
	if err := rawSend(r.fd, msg); err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		n, err := r.recv()
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(r.buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Seq != r.seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("short netlink error")
				}
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return nil, unix.Errno(-e)
				}
				return out, nil
			default:
				out = append(out, append([]byte(nil), m.Data...))
			}
		}
	}
}

// rawSend and recv use raw system calls: rtnetlink handles a request
// in the sender's sendmsg, so neither blocks (a recv that would is
// retried as an ordinary, blocking one). The Go runtime's syscall
// bookkeeping around each call — under TCG slow enough that its
// monitor hands the P to another thread on every call — is skipped.
func rawSend(fd int, msg []byte) error {
	var sa unix.RawSockaddrNetlink
	sa.Family = unix.AF_NETLINK
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)), 0,
		uintptr(unsafe.Pointer(&sa)), unix.SizeofSockaddrNetlink)
	if e != 0 {
		return e
	}
	return nil
}

func (r *rtnl) recv() (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(r.fd), uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)),
		unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN {
		m, _, err := unix.Recvfrom(r.fd, r.buf, 0)
		return m, err
	}
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rtattr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofRtAttr+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// link changes an existing link's flags (within change) and attributes.
func (r *rtnl) link(index int, flags, change uint32, attrs []byte) error {
	b := []byte{unix.AF_UNSPEC, 0, 0, 0}
	b = binary.NativeEndian.AppendUint32(b, uint32(index))
	b = binary.NativeEndian.AppendUint32(b, flags)
	b = binary.NativeEndian.AppendUint32(b, change)
	_, err := r.do(unix.RTM_NEWLINK, 0, append(b, attrs...))
	return err
}

func family(a netip.Addr) byte {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// addr adds (RTM_NEWADDR) or deletes (RTM_DELADDR) an address.
func (r *rtnl) addr(typ, flags uint16, index int, p netip.Prefix) error {
	return r.addrFlags(typ, flags, index, p, 0, unix.RT_SCOPE_UNIVERSE)
}

// addrFlags is addr with ifaddrmsg flags (IFA_F_*) and a scope.
func (r *rtnl) addrFlags(typ, flags uint16, index int, p netip.Prefix, ifaFlags, scope byte) error {
	a := p.Addr()
	b := []byte{family(a), byte(p.Bits()), ifaFlags, scope}
	b = binary.NativeEndian.AppendUint32(b, uint32(index))
	b = rtattr(b, unix.IFA_LOCAL, a.AsSlice())
	b = rtattr(b, unix.IFA_ADDRESS, a.AsSlice())
	if a.Is4() && typ == unix.RTM_NEWADDR && p.Bits() < 31 {
		bc := a.As4()
		host := ^uint32(0) >> p.Bits()
		v := binary.BigEndian.Uint32(bc[:]) | host
		binary.BigEndian.PutUint32(bc[:], v)
		b = rtattr(b, unix.IFA_BROADCAST, bc[:])
	}
	_, err := r.do(typ, flags, b)
	return err
}

// defaultRoute replaces the main table's default route.
func (r *rtnl) defaultRoute(index int, gw netip.Addr) error {
	b := []byte{family(gw), 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST}
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = rtattr(b, unix.RTA_GATEWAY, gw.AsSlice())
	b = rtattr(b, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(index)))
	_, err := r.do(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, b)
	return err
}

// flushNeighbours deletes the dynamic neighbour entries of a link (what
// `ip neigh flush dev` does).
func (r *rtnl) flushNeighbours(index int) error {
	req := make([]byte, 12) // ndmsg, AF_UNSPEC: every family
	msgs, err := r.do(unix.RTM_GETNEIGH, unix.NLM_F_DUMP, req)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if len(m) < 12 {
			continue
		}
		ifindex := int32(binary.NativeEndian.Uint32(m[4:8]))
		state := binary.NativeEndian.Uint16(m[8:10])
		if int(ifindex) != index || state&(unix.NUD_PERMANENT|unix.NUD_NOARP) != 0 {
			continue
		}
		dst := findAttr(m[12:], unix.NDA_DST)
		if dst == nil {
			continue
		}
		del := append([]byte(nil), m[:12]...)
		del = rtattr(del, unix.NDA_DST, dst)
		if _, err := r.do(unix.RTM_DELNEIGH, 0, del); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	return nil
}

// findAttr returns the value of the first attribute of type typ.
func findAttr(b []byte, typ uint16) []byte {
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		t := binary.NativeEndian.Uint16(b[2:4])
		if l < unix.SizeofRtAttr || l > len(b) {
			return nil
		}
		if t == typ {
			return b[unix.SizeofRtAttr:l]
		}
		l = (l + 3) &^ 3
		if l > len(b) {
			return nil
		}
		b = b[l:]
	}
	return nil
}

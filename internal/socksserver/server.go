// Package socksserver is a small SOCKS5 server (RFC 1928, CONNECT only,
// RFC 1929 username and password) that records what it was asked: the
// upstream proxy of the egress tests (shim/egress, the test internet).
// Not product code.
package socksserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Request is one CONNECT: the target as the client named it.
type Request struct {
	Domain bool   // ATYP domain (the client left the name to the proxy)
	Host   string // name or IPv4 address
	Port   int
}

// Server serves SOCKS5 on a listener.
type Server struct {
	// Username and Password, when set, are required.
	Username, Password string
	// Dial opens the target (nil: a net.Dialer; a name resolved by it).
	Dial func(network, addr string) (net.Conn, error)

	mu   sync.Mutex
	seen []Request
}

// Requests are the CONNECTs accepted so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.seen...)
}

// Serve accepts until l closes.
func (s *Server) Serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go s.serve(c)
	}
}

func (s *Server) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req, err := s.handshake(c)
	if err != nil {
		return
	}
	dial := s.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second}).Dial
	}
	up, err := dial("tcp", net.JoinHostPort(req.Host, strconv.Itoa(req.Port)))
	if err != nil {
		_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0}) // connection refused
		return
	}
	defer up.Close()
	s.mu.Lock()
	s.seen = append(s.seen, req)
	s.mu.Unlock()
	if _, err := c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// handshake reads the greeting, the authentication and the request.
func (s *Server) handshake(c net.Conn) (Request, error) {
	head := make([]byte, 2)
	if _, err := io.ReadFull(c, head); err != nil || head[0] != 5 {
		return Request{}, errors.New("not SOCKS5")
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return Request{}, err
	}
	if err := s.authenticate(c, methods); err != nil {
		return Request{}, err
	}
	hdr := make([]byte, 4)
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[1] != 1 {
		_, _ = c.Write([]byte{5, 7, 0, 1, 0, 0, 0, 0, 0, 0}) // command not supported
		return Request{}, errors.New("not CONNECT")
	}
	var req Request
	switch hdr[3] {
	case 1:
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil {
			return req, err
		}
		req.Host = net.IP(b).String()
	case 3:
		n := make([]byte, 1)
		if _, err := io.ReadFull(c, n); err != nil {
			return req, err
		}
		b := make([]byte, n[0])
		if _, err := io.ReadFull(c, b); err != nil {
			return req, err
		}
		req.Host, req.Domain = string(b), true
	default:
		_, _ = c.Write([]byte{5, 8, 0, 1, 0, 0, 0, 0, 0, 0}) // address type not supported
		return req, fmt.Errorf("address type %d", hdr[3])
	}
	p := make([]byte, 2)
	if _, err := io.ReadFull(c, p); err != nil {
		return req, err
	}
	req.Port = int(binary.BigEndian.Uint16(p))
	return req, nil
}

// authenticate picks username/password when set (and checks them), else
// no authentication.
func (s *Server) authenticate(c net.Conn, methods []byte) error {
	want := byte(0)
	if s.Username != "" {
		want = 2
	}
	for _, m := range methods {
		if m == want {
			if _, err := c.Write([]byte{5, want}); err != nil {
				return err
			}
			if want == 0 {
				return nil
			}
			return s.checkPassword(c)
		}
	}
	_, _ = c.Write([]byte{5, 0xff})
	return errors.New("no acceptable method")
}

func (s *Server) checkPassword(c net.Conn) error {
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	user := make([]byte, b[1])
	if _, err := io.ReadFull(c, user); err != nil {
		return err
	}
	n := make([]byte, 1)
	if _, err := io.ReadFull(c, n); err != nil {
		return err
	}
	pass := make([]byte, n[0])
	if _, err := io.ReadFull(c, pass); err != nil {
		return err
	}
	if string(user) != s.Username || string(pass) != s.Password {
		_, _ = c.Write([]byte{1, 1})
		return errors.New("bad credentials")
	}
	_, err := c.Write([]byte{1, 0})
	return err
}

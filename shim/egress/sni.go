package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// errPeeked ends the handshake peekHello runs once it has the hello.
var errPeeked = errors.New("client hello read")

// peekHello reads the TLS ClientHello c opens with and returns its
// server name and a conn that replays what was read: the proxy decides
// from the name whether to terminate the TLS (a rule's domain) or pass
// the bytes through untouched.
func peekHello(c net.Conn, timeout time.Duration) (string, net.Conn, error) {
	var seen bytes.Buffer
	var name string
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	err := tls.Server(readOnly{io.TeeReader(c, &seen)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name = h.ServerName
			return nil, errPeeked
		}}).Handshake()
	_ = c.SetReadDeadline(time.Time{})
	if !errors.Is(err, errPeeked) {
		return "", nil, err
	}
	return name, &replayConn{Conn: c, r: io.MultiReader(&seen, c)}, nil
}

// readOnly is the peeking handshake's conn: it reads, and its alerts go
// nowhere.
type readOnly struct{ r io.Reader }

func (c readOnly) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnly) Write([]byte) (int, error)        { return 0, io.ErrClosedPipe }
func (readOnly) Close() error                     { return nil }
func (readOnly) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (readOnly) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (readOnly) SetDeadline(time.Time) error      { return nil }
func (readOnly) SetReadDeadline(time.Time) error  { return nil }
func (readOnly) SetWriteDeadline(time.Time) error { return nil }

// replayConn reads what was peeked, then the conn.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

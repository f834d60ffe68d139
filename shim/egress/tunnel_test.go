package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/sandlot-dev/sandlot/internal/socksserver"
)

// socksWorld is a world whose upstreams are reached through a SOCKS5
// server that maps every name to 127.0.0.1.
func socksWorld(t *testing.T, dst netip.AddrPort) (*world, *socksserver.Server, net.Listener) {
	w := newWorld(t)
	tlsPort := w.tlsUp.Listener.Addr().(*net.TCPAddr).Port
	srv := &socksserver.Server{Username: "u", Password: "p", Dial: func(network, addr string) (net.Conn, error) {
		_, port, _ := net.SplitHostPort(addr)
		if port == "443" {
			port = itoa(tlsPort)
		}
		return net.Dial(network, net.JoinHostPort("127.0.0.1", port))
	}}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sl.Close() })
	go srv.Serve(sl)
	w.p.cfg.OriginalDst = func(net.Conn) (netip.AddrPort, error) { return dst, nil }
	w.p.cfg.Learned = func(a netip.Addr) (string, bool) { return "named.test", a == dst.Addr() }
	w.p.cfg.ResolveProxy = func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("no names here") }
	w.p.cfg.PermitProxy = func(netip.Addr) error { return nil }
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.p.ServeTunnel(tl)
	w.p.SetUpstreamProxy(&UpstreamProxy{Address: sl.Addr().String(), Username: "u", Password: "p"})
	return w, srv, tl
}

// get sends a GET over a raw connection to the tunnel: the status line.
func tunnelGet(t *testing.T, tl net.Listener) string {
	t.Helper()
	c, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: named.test\r\nConnection: close\r\n\r\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

func TestTunnelThroughSOCKS(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.1:1") // the plain upstream's port, below
	w, srv, tl := socksWorld(t, dst)
	port := w.plainUp.Listener.Addr().(*net.TCPAddr).Port
	w.p.cfg.OriginalDst = func(net.Conn) (netip.AddrPort, error) {
		return netip.AddrPortFrom(dst.Addr(), uint16(port)), nil
	}
	if got := tunnelGet(t, tl); got != "HTTP/1.1 200 OK" {
		t.Fatalf("through the tunnel: %q", got)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || !reqs[0].Domain || reqs[0].Host != "named.test" || reqs[0].Port != port {
		t.Fatalf("the proxy was asked %+v; want named.test:%d by name", reqs, port)
	}
	// The header rules' upstream goes through the proxy too, by name.
	if err := w.p.SetRules(rules("example.com", "Bearer x"), nil); err != nil {
		t.Fatal(err)
	}
	if code, _ := w.get(t, w.client(t), "https://example.com/"); code != 200 || w.lastSeen() != "Bearer x" {
		t.Fatalf("rule through the proxy: %d, upstream saw %q", code, w.lastSeen())
	}
	if r := srv.Requests(); r[len(r)-1].Host != "example.com" || r[len(r)-1].Port != 443 {
		t.Fatalf("the rule's connection asked %+v", r[len(r)-1])
	}
}

func TestTunnelFailsClosed(t *testing.T) {
	w, srv, tl := socksWorld(t, netip.MustParseAddrPort("127.0.0.1:9"))
	// Refused by the sandbox's policy: the proxy is never asked.
	w.p.cfg.Permit = func(string, netip.Addr) error { return errors.New("closed") }
	if got := tunnelGet(t, tl); got != "" {
		t.Fatalf("a refused destination answered %q", got)
	}
	w.p.cfg.Permit = func(string, netip.Addr) error { return nil }
	// A wrong password, and no proxy at all: nothing, never direct.
	w.p.SetUpstreamProxy(&UpstreamProxy{Address: srv2addr(t), Username: "u", Password: "wrong"})
	if got := tunnelGet(t, tl); got != "" {
		t.Fatalf("a proxy that refused us answered %q", got)
	}
	w.p.SetUpstreamProxy(nil)
	if got := tunnelGet(t, tl); got != "" {
		t.Fatalf("no proxy: %q", got)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Fatalf("the proxy served %d requests", n)
	}
}

// srv2addr is a second SOCKS server that wants other credentials.
func srv2addr(t *testing.T) string {
	s := &socksserver.Server{Username: "u", Password: "right"}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go s.Serve(l)
	return l.Addr().String()
}

package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/net/proxy"
)

// UpstreamProxy is the SOCKS5 proxy a sandbox's TCP leaves through
// (E2B's egressProxy).
type UpstreamProxy struct {
	Address            string // host:port
	Username, Password string
}

// SetUpstreamProxy routes every upstream connection — the tunnel's and
// the header rules' — through u from now on (nil: direct). Connections
// already open stay as they are.
func (p *Proxy) SetUpstreamProxy(u *UpstreamProxy) {
	p.upstream.Store(u)
}

// ServeTunnel takes the VM's TCP the netns redirected to l (with an
// egress proxy every connection the VM opens): each is checked against
// the sandbox's policy, as the VM's filter would, and opened through the
// SOCKS5 proxy — by name when the address is a domain's allowOut answer
// (the proxy resolves it), else by address. No proxy: closed (fail
// closed, never direct).
func (p *Proxy) ServeTunnel(l net.Listener) {
	p.onClose(l.Close)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.acceptWithSlots(l, func(c net.Conn) bool { p.tunnelConn(c); return false })
	}()
}

func (p *Proxy) tunnelConn(c net.Conn) {
	defer c.Close()
	dst, err := p.cfg.OriginalDst(c)
	if err != nil {
		p.cfg.Logf("egress tunnel: %v", err)
		return
	}
	name, _ := p.cfg.Learned(dst.Addr())
	if err := p.cfg.Permit(name, dst.Addr()); err != nil {
		return // as the filter would: refused
	}
	target := dst.String()
	if name != "" {
		target = net.JoinHostPort(name, strconv.Itoa(int(dst.Port())))
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := p.viaProxy(ctx, target)
	cancel()
	if err != nil {
		p.cfg.Logf("egress tunnel to %s: %v", target, err)
		return
	}
	defer up.Close()
	splice(c, up)
}

// viaProxy opens target through the upstream SOCKS5 proxy (an error
// without one). The proxy's own address must be one the platform lets
// sandboxes reach (PermitProxy).
func (p *Proxy) viaProxy(ctx context.Context, target string) (net.Conn, error) {
	u := p.upstream.Load()
	if u == nil {
		return nil, errors.New("no egress proxy")
	}
	host, port, err := net.SplitHostPort(u.Address)
	if err != nil {
		return nil, fmt.Errorf("egress proxy %q: %w", u.Address, err)
	}
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else if addrs, err = p.cfg.ResolveProxy(ctx, host); err != nil {
		return nil, fmt.Errorf("egress proxy %s: %w", host, err)
	}
	var errs []error
	for _, a := range addrs {
		if err := p.cfg.PermitProxy(a); err != nil {
			errs = append(errs, err)
			continue
		}
		var auth *proxy.Auth
		if u.Username != "" {
			auth = &proxy.Auth{User: u.Username, Password: u.Password}
		}
		d, err := proxy.SOCKS5("tcp", net.JoinHostPort(a.String(), port), auth, dialerFunc(p.cfg.Dial))
		if err != nil {
			return nil, err
		}
		c, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", target)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("through egress proxy %s: %w", u.Address, errors.Join(errs...))
}

// dialerFunc is a proxy.ContextDialer of a dial function.
type dialerFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (f dialerFunc) Dial(network, addr string) (net.Conn, error) {
	return f(context.Background(), network, addr)
}

func (f dialerFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

// splice copies both ways until both are done.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	for _, pair := range [][2]net.Conn{{a, b}, {b, a}} {
		go func() {
			_, _ = io.Copy(pair[0], pair[1])
			if cw, ok := pair[0].(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			done <- struct{}{}
		}()
	}
	<-done
	<-done
}

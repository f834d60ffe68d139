package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Serve answers plain HTTP on httpL and TLS on tlsL (the VM's ports 80
// and 443 on the proxy's address) until Close.
func (p *Proxy) Serve(httpL, tlsL net.Listener) {
	h := &httputil.ReverseProxy{Rewrite: p.rewrite, Transport: p.tr, ErrorHandler: p.upstreamError}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serveRequest(w, r, h) })
	// An idle connection holds one of the VM's slots: it goes after a while.
	plain := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: idleTimeout}
	terminated := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: idleTimeout}
	inner := newConnQueue(tlsL.Addr())
	p.onClose(func() error { return errors.Join(plain.Close(), terminated.Close(), tlsL.Close()) })
	p.wg.Add(3)
	go func() { defer p.wg.Done(); _ = plain.Serve(&limited{Listener: httpL, slots: p.slots}) }()
	go func() { defer p.wg.Done(); _ = terminated.Serve(inner) }()
	go func() { defer p.wg.Done(); p.acceptTLS(tlsL, inner); inner.Close() }()
}

// acceptTLS reads each connection's hello: a rule's domain is
// terminated (queued for the HTTP server), another name passed through.
func (p *Proxy) acceptTLS(l net.Listener, inner *connQueue) {
	p.acceptWithSlots(l, func(c net.Conn) bool { return p.routeTLS(c, inner) })
}

// acceptWithSlots accepts until l closes, giving each connection one of
// the VM's slots (none left: it is closed) and serve, which says whether
// the connection kept its slot (freed when it closes) or is done.
func (p *Proxy) acceptWithSlots(l net.Listener, serve func(net.Conn) (kept bool)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		select {
		case p.slots <- struct{}{}:
			go func() {
				if !serve(c) {
					<-p.slots
				}
			}()
		default:
			c.Close() // the VM holds maxConns already
		}
	}
}

// routeTLS hands c on; false when it is done with (its slot free).
func (p *Proxy) routeTLS(c net.Conn, inner *connQueue) bool {
	name, rc, err := peekHello(c, helloTimeout)
	if err != nil || name == "" {
		c.Close() // no SNI: nothing says where it goes
		return false
	}
	name = normalHost(name)
	if p.ruleFor(name) != nil {
		// The *tls.Conn outermost: the HTTP server fills r.TLS only for one.
		tc := tls.Server(&released{Conn: rc, slots: p.slots}, &tls.Config{NextProtos: []string{"http/1.1"},
			MinVersion:     tls.VersionTLS12,
			GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return p.ca.leaf(name) }})
		return inner.push(tc)
	}
	p.passThrough(rc, name)
	return false
}

// passThrough passes a TLS connection for a name without a rule through
// to it, untouched.
func (p *Proxy) passThrough(c net.Conn, name string) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := p.dialUpstream(ctx, "tcp", net.JoinHostPort(name, "443"))
	cancel()
	if err != nil {
		p.cfg.Logf("egress: pass %s through: %v", name, err)
		return
	}
	defer up.Close()
	splice(c, up)
}

// serveRequest refuses what must not be forwarded, then forwards.
func (p *Proxy) serveRequest(w http.ResponseWriter, r *http.Request, h *httputil.ReverseProxy) {
	host := normalHost(r.Host)
	switch {
	case host == "":
		http.Error(w, "sandlot egress: the request names no host", http.StatusBadRequest)
		return
	case r.TLS != nil && host != normalHost(r.TLS.ServerName):
		// The credential is for the name the TLS was made for; a request
		// for another host on that connection is not sent anywhere.
		http.Error(w, fmt.Sprintf("sandlot egress: host %q is not this connection's %q", host, r.TLS.ServerName), http.StatusMisdirectedRequest)
		return
	}
	if rl := p.ruleFor(host); rl != nil && rl.broken != "" {
		http.Error(w, "sandlot egress: not sent: "+rl.broken, http.StatusBadGateway)
		return
	}
	h.ServeHTTP(w, r)
}

// rewrite sends the request to its host, with the rule's headers (set
// after the hop-by-hop ones are gone, replacing the sandbox's own).
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "http"
	if pr.In.TLS != nil {
		pr.Out.URL.Scheme = "https"
	}
	pr.Out.URL.Host = pr.In.Host
	pr.Out.Host = pr.In.Host
	if rl := p.ruleFor(pr.In.Host); rl != nil {
		for _, kv := range rl.headers {
			pr.Out.Header.Set(kv[0], kv[1])
		}
	}
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	http.Error(w, "sandlot egress: "+err.Error(), http.StatusBadGateway)
}

// transport reaches upstreams: dialled by dialUpstream, certificates
// verified against RootCAs with the request's host as the name.
func (p *Proxy) transport() *http.Transport {
	return &http.Transport{
		DialContext:         p.dialUpstream,
		TLSClientConfig:     &tls.Config{RootCAs: p.cfg.RootCAs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: dialTimeout,
		MaxIdleConns:        32,
		IdleConnTimeout:     90 * time.Second,
	}
}

// dialUpstream resolves the host itself (never where the VM pointed)
// and dials the first address the sandbox's policy permits.
func (p *Proxy) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, fmt.Errorf("upstream %q: bad port", addr)
	}
	name := host
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs, name = []netip.Addr{a.Unmap()}, ""
	} else if addrs, err = p.cfg.Resolve(ctx, host); err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		if err := p.cfg.Permit(name, a); err != nil {
			errs = append(errs, err)
			continue
		}
		if p.upstream.Load() != nil {
			// Through the sandbox's SOCKS5 proxy, by name (remote DNS).
			return p.viaProxy(ctx, addr)
		}
		c, err := p.cfg.Dial(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("upstream %s: %w", host, errors.Join(errs...))
}

// limited holds one of the proxy's slots per accepted connection.
type limited struct {
	net.Listener
	slots chan struct{}
}

func (l *limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &released{Conn: c, slots: l.slots}, nil
		default:
			c.Close()
		}
	}
}

// released frees its slot when closed (once).
type released struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *released) Close() error {
	c.once.Do(func() { <-c.slots })
	return c.Conn.Close()
}

// connQueue is a listener of the connections acceptTLS terminates.
type connQueue struct {
	addr   net.Addr
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) push(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.done:
		c.Close()
		return true // Close freed its slot
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error   { q.closed.Do(func() { close(q.done) }); return nil }
func (q *connQueue) Addr() net.Addr { return q.addr }

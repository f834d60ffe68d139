package dnsfwd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Defaults for the zero fields of a Config.
const (
	DefaultTimeout     = 2 * time.Second
	DefaultMinTTL      = 5 * time.Second
	DefaultMaxTTL      = time.Hour
	DefaultMaxInflight = 256
)

const (
	// tcpIdle bounds how long a TCP client may take to send each query.
	tcpIdle = 10 * time.Second
	// tcpWrite bounds writing a reply to a TCP client.
	tcpWrite = 5 * time.Second
)

// ErrClosed is returned by ServePacket and ServeListener after Close.
var ErrClosed = errors.New("dnsfwd: forwarder closed")

// Config configures a Forwarder.
type Config struct {
	// Upstreams are the resolvers ("ip:port"), tried in order.
	Upstreams []string
	// Dial connects to an upstream; nil uses a net.Dialer. The shim dials
	// from the host network namespace.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Learner is told the addresses of allowed answers (required).
	Learner Learner
	// Timeout bounds each try of an upstream (default 2s).
	Timeout time.Duration
	// MinTTL and MaxTTL clamp the TTL passed to Learn (defaults 5s, 1h).
	MinTTL, MaxTTL time.Duration
	// MaxInflight bounds queries being resolved at once, and open TCP
	// client connections (default 256); beyond it queries get SERVFAIL.
	MaxInflight int
}

// Forwarder relays the VM's DNS queries and learns allowed answers.
type Forwarder struct {
	upstreams      []string
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	learner        Learner
	timeout        time.Duration
	minTTL, maxTTL time.Duration
	names          atomic.Pointer[names]
	intercepted    atomic.Pointer[intercept]
	inflight       chan struct{} // semaphore of queries being handled
	conns          chan struct{} // semaphore of open TCP client connections

	ctx    context.Context // cancelled by Close, aborting upstream tries
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	open   map[io.Closer]struct{} // sockets and connections Close must close
	wg     sync.WaitGroup         // serve loops, connections and handlers
}

// New checks cfg and returns a Forwarder that learns nothing until
// SetMatcher is called.
func New(cfg Config) (*Forwarder, error) {
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("dnsfwd: no upstreams")
	}
	f := &Forwarder{
		dial:    cfg.Dial,
		learner: cfg.Learner,
		timeout: orDefault(cfg.Timeout, DefaultTimeout),
		minTTL:  orDefault(cfg.MinTTL, DefaultMinTTL),
		maxTTL:  orDefault(cfg.MaxTTL, DefaultMaxTTL),
		open:    map[io.Closer]struct{}{},
	}
	for _, u := range cfg.Upstreams {
		ap, err := netip.ParseAddrPort(u)
		if err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("dnsfwd: upstream %q is not an ip:port", u)
		}
		f.upstreams = append(f.upstreams, ap.String())
	}
	if f.learner == nil {
		return nil, errors.New("dnsfwd: no learner")
	}
	if f.timeout < 0 || f.minTTL < 0 || f.minTTL > f.maxTTL || cfg.MaxInflight < 0 {
		return nil, fmt.Errorf("dnsfwd: bad limits (timeout %v, ttl %v..%v, max inflight %d)",
			cfg.Timeout, cfg.MinTTL, cfg.MaxTTL, cfg.MaxInflight)
	}
	if f.dial == nil {
		f.dial = (&net.Dialer{}).DialContext
	}
	n := cfg.MaxInflight
	if n == 0 {
		n = DefaultMaxInflight
	}
	f.inflight = make(chan struct{}, n)
	f.conns = make(chan struct{}, n)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// names is which names are learned, and whether the others are answered
// at all.
type names struct {
	match Matcher
	// only: other names get NXDOMAIN without asking upstream (the
	// sandbox's egress is closed, and a query is itself a message out),
	// but those resolvable matches: names the operator lets be resolved
	// then (cluster names), answered and never learned.
	only       bool
	resolvable Matcher
}

// SetMatcher sets which names are learned from now on (nil: none) and,
// with onlyMatched, that no other name is resolved except those
// resolvable matches (nil: none). It is safe to call while serving, as
// the sandbox's rules change.
func (f *Forwarder) SetMatcher(m Matcher, onlyMatched bool, resolvable Matcher) {
	f.names.Store(&names{match: m, only: onlyMatched, resolvable: resolvable})
}

// answered reports whether a query for name is resolved at all.
func (n *names) answered(name string) bool {
	if n == nil || !n.only || n.allowed(name) {
		return true
	}
	return n.resolvable != nil && !strings.ContainsRune(name, '\\') && n.resolvable(name)
}

// allowed reports whether name is one the sandbox's rules open.
func (n *names) allowed(name string) bool {
	// A backslash escapes a dot or odd byte inside a label: no allowOut
	// domain has one, and the matcher compares text, so never match it.
	return n != nil && n.match != nil && !strings.ContainsRune(name, '\\') && n.match(name)
}

// track registers c to be closed by Close and counts its user in wg;
// it reports false once the Forwarder is closed.
func (f *Forwarder) track(c io.Closer) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.open[c] = struct{}{}
	f.wg.Add(1)
	return true
}

func (f *Forwarder) untrack(c io.Closer) {
	f.mu.Lock()
	delete(f.open, c)
	f.mu.Unlock()
	f.wg.Done()
}

func (f *Forwarder) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// Close stops serving, closes the sockets handed to ServePacket and
// ServeListener, aborts upstream tries and waits for all handlers.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	var errs []error
	for c := range f.open {
		if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("dnsfwd: close: %w", err))
		}
	}
	f.mu.Unlock()
	f.cancel() // after closing, so no aborted query is still answered
	f.wg.Wait()
	return errors.Join(errs...)
}

// ServePacket answers UDP queries on pc until Close (then it returns nil)
// or a read fails.
func (f *Forwarder) ServePacket(pc net.PacketConn) error {
	if !f.track(pc) {
		return ErrClosed
	}
	defer f.untrack(pc)
	buf := make([]byte, maxQuerySize+1) // one more, to see oversize
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if f.isClosed() {
				return nil
			}
			return fmt.Errorf("dnsfwd: read udp: %w", err)
		}
		raw := append([]byte(nil), buf[:n]...)
		select {
		case f.inflight <- struct{}{}:
		default:
			if out := headerReply(raw, dns.RcodeServerFailure); out != nil {
				_, _ = pc.WriteTo(out, addr)
			}
			continue
		}
		f.wg.Go(func() {
			defer func() { <-f.inflight }()
			if out := f.handle(f.ctx, raw, false); out != nil {
				_, _ = pc.WriteTo(out, addr) // the client may be gone
			}
		})
	}
}

// ServeListener answers TCP queries on l's connections until Close (then
// it returns nil) or accepting fails.
func (f *Forwarder) ServeListener(l net.Listener) error {
	if !f.track(l) {
		return ErrClosed
	}
	defer f.untrack(l)
	for {
		c, err := l.Accept()
		if err != nil {
			if f.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("dnsfwd: accept: %w", err)
		}
		select {
		case f.conns <- struct{}{}:
		default:
			_ = c.Close() // too many connections
			continue
		}
		if !f.track(c) {
			_ = c.Close()
			<-f.conns
			continue
		}
		go func() {
			defer func() { <-f.conns }()
			defer f.untrack(c)
			defer c.Close()
			f.serveConn(c)
		}()
	}
}

// serveConn answers one TCP client's queries in order until it is idle,
// sends something unanswerable, or goes away.
func (f *Forwarder) serveConn(c net.Conn) {
	for {
		if err := c.SetReadDeadline(time.Now().Add(tcpIdle)); err != nil {
			return
		}
		raw, err := readFrame(c)
		if err != nil {
			return
		}
		var out []byte
		select {
		case f.inflight <- struct{}{}:
			out = f.handle(f.ctx, raw, true)
			<-f.inflight
		default:
			out = headerReply(raw, dns.RcodeServerFailure)
		}
		if out == nil {
			return
		}
		if err := c.SetWriteDeadline(time.Now().Add(tcpWrite)); err != nil {
			return
		}
		if err := writeFrame(c, out); err != nil {
			return
		}
	}
}

// readFrame reads one length-prefixed DNS message (RFC 1035 4.2.2).
func readFrame(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, fmt.Errorf("read length: %w", err)
	}
	n := binary.BigEndian.Uint16(l[:])
	if n == 0 {
		return nil, errors.New("empty message")
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("read message: %w", err)
	}
	return b, nil
}

// writeFrame writes msg length-prefixed, in one write.
func writeFrame(w io.Writer, msg []byte) error {
	if len(msg) > 0xffff {
		return fmt.Errorf("message of %d bytes too long for TCP", len(msg))
	}
	b := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(b, uint16(len(msg)))
	copy(b[2:], msg)
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write message: %w", err)
	}
	return nil
}

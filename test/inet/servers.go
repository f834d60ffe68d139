package inet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/sandlot-dev/sandlot/shim/podnet"
)

// What each web host of the test internet answers (HTTP 200).
var Bodies = map[string]string{
	IPPublic:  "public",
	IPAllowed: "allowed-by-domain",
	IPWild:    "allowed-by-wildcard",
	IPRange:   "test-net-3",
	IPMeta:    "metadata",
}

// zone is the test internet's DNS: the pods' resolver, so the upstream of
// each VM's forwarder.
var Zone = map[string]string{
	"public.test.":      IPPublic,
	"api.allowed.test.": IPAllowed,
	"x.wild.test.":      IPWild,
	"denied.test.":      IPRange,
	// A name an allowOut domain matches whose answer is a denied address.
	"private.allowed.test.": IPPrivate,
}

// SinkPort: every address of the test internet accepts TCP connections
// here, reads until the peer's EOF, answers one byte and closes: the
// target of bench-network's connect latency and throughput.
const SinkPort = 9000

// BenchDomains is how many names BenchDomain gives the zone.
const BenchDomains = 20

// BenchDomain is the i-th of the zone's bench names and its address, each
// its own in RangeNet.
func BenchDomain(i int) (name, ip string) {
	return fmt.Sprintf("d%d.bench.test", i), fmt.Sprintf("203.0.113.%d", 100+i)
}

func init() {
	for i := range BenchDomains {
		name, ip := BenchDomain(i)
		Zone[name+"."] = ip
	}
}

// ZoneTTL is short: the forwarder opens an allowed name's addresses for it.
const ZoneTTL = 30

// serve opens every listener inside the netns (sockets keep the netns they
// were made in) and serves them from ordinary goroutines.
func (x *Internet) serve() error {
	var web []net.Listener
	var dnsUDP, counter net.PacketConn
	var dnsTCP, sink net.Listener
	err := podnet.Run(x.NsPath(), func() (err error) {
		for ip := range Bodies {
			l, err := x.listen(net.JoinHostPort(ip, "80"))
			if err != nil {
				return err
			}
			web = append(web, l)
		}
		if dnsUDP, err = x.listenPacket(net.JoinHostPort(IPDNS, "53")); err != nil {
			return err
		}
		if dnsTCP, err = x.listen(net.JoinHostPort(IPDNS, "53")); err != nil {
			return err
		}
		if counter, err = x.listenPacket(fmt.Sprintf("%s:%d", InetSide, UDPPort)); err != nil {
			return err
		}
		sink, err = x.listen(fmt.Sprintf("0.0.0.0:%d", SinkPort))
		return err
	})
	if err != nil {
		return err
	}
	x.serveWeb(web)
	go serveSink(sink)
	for _, srv := range []*dns.Server{{PacketConn: dnsUDP}, {Listener: dnsTCP}} {
		srv.Handler = dns.HandlerFunc(x.answerDNS)
		go func() { _ = srv.ActivateAndServe() }()
		x.closers = append(x.closers, func() error { _ = srv.Shutdown(); return nil })
	}
	go x.count(counter)
	return nil
}

// serveSink reads each connection to its EOF, answers a byte and closes,
// until the listener closes.
func serveSink(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
			_, _ = io.Copy(io.Discard, c)
			_, _ = c.Write([]byte{'k'})
		}()
	}
}

// listen and listenPacket open a socket teardown closes (its server may
// have closed it first: that error is no news).
func (x *Internet) listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp4", addr)
	if err == nil {
		x.closers = append(x.closers, func() error { _ = l.Close(); return nil })
	}
	return l, err
}

func (x *Internet) listenPacket(addr string) (net.PacketConn, error) {
	pc, err := net.ListenPacket("udp4", addr)
	if err == nil {
		x.closers = append(x.closers, func() error { _ = pc.Close(); return nil })
	}
	return pc, err
}

// serveWeb answers each web host's body and records every connection
// accepted: when the VM's filter let it through, as the server saw it.
func (x *Internet) serveWeb(ls []net.Listener) {
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
			_, _ = io.WriteString(w, Bodies[hostOf(local)])
		}),
		ConnState: func(conn net.Conn, s http.ConnState) {
			if s == http.StateNew {
				x.mu.Lock()
				x.conns = append(x.conns, arrival{local: hostOf(conn.LocalAddr()), remote: hostOf(conn.RemoteAddr()), at: time.Now()})
				x.mu.Unlock()
			}
		}}
	for _, l := range ls {
		go func() { _ = srv.Serve(l) }()
	}
	x.closers = append(x.closers, srv.Close)
}

func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	h, _, _ := net.SplitHostPort(a.String())
	return h
}

func (x *Internet) answerDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	qq := q.Question[0]
	x.mu.Lock()
	if x.asked == nil {
		x.asked = map[string]bool{}
	}
	x.asked[strings.ToLower(qq.Name)] = true
	x.mu.Unlock()
	ip, ok := Zone[strings.ToLower(qq.Name)]
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case qq.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{A: net.ParseIP(ip).To4(),
			Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ZoneTTL}})
	}
	_ = w.WriteMsg(m)
}

// count records every Datagram to the counter until its socket closes.
func (x *Internet) count(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		x.mu.Lock()
		x.frames = append(x.frames, Datagram{Payload: string(buf[:n]), From: from.String()})
		x.mu.Unlock()
	}
}

// arrivals are when connections from remote reached the host local,
// oldest first.
func (x *Internet) Arrivals(local, remote string) []time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []time.Time
	for _, a := range x.conns {
		if a.local == local && a.remote == remote {
			out = append(out, a.at)
		}
	}
	return out
}

// Asked reports whether the DNS server was asked name (fully qualified,
// any case).
func (x *Internet) Asked(name string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.asked[strings.ToLower(dns.Fqdn(name))]
}

// datagrams are the counter's datagrams whose payload starts with tag.
func (x *Internet) Datagrams(tag string) []Datagram {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []Datagram
	for _, d := range x.frames {
		if strings.HasPrefix(d.Payload, tag+" ") {
			out = append(out, d)
		}
	}
	return out
}

// selfCheck: the host reaches the public web host and the DNS server
// answers, before a cluster depends on them.
func (x *Internet) selfCheck() error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := hc.Get("http://" + IPPublic + "/")
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != Bodies[IPPublic] {
		return fmt.Errorf("http://%s/ answered %s %q", IPPublic, resp.Status, b)
	}
	q := new(dns.Msg).SetQuestion("public.test.", dns.TypeA)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, _, err := new(dns.Client).ExchangeContext(ctx, q, net.JoinHostPort(IPDNS, "53"))
	if err != nil {
		return fmt.Errorf("DNS at %s: %w", IPDNS, err)
	}
	if a, ok := firstA(r); !ok || a != IPPublic {
		return fmt.Errorf("DNS at %s: public.test is %v", IPDNS, r.Answer)
	}
	if out, err := exec.CommandContext(ctx, "git", "ls-remote", GitBase+GitRepo).CombinedOutput(); err != nil {
		return fmt.Errorf("git ls-remote %s%s: %v: %s", GitBase, GitRepo, err, out)
	}
	return nil
}

func firstA(r *dns.Msg) (string, bool) {
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), true
		}
	}
	return "", false
}

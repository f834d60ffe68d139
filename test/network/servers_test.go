package network

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/sandlot-dev/sandlot/shim/podnet"
)

// What each web host of the test internet answers (HTTP 200).
var bodies = map[string]string{
	ipPublic:  "public",
	ipAllowed: "allowed-by-domain",
	ipWild:    "allowed-by-wildcard",
	ipRange:   "test-net-3",
	ipMeta:    "metadata",
}

// zone is the test internet's DNS: the pods' resolver, so the upstream of
// each VM's forwarder.
var zone = map[string]string{
	"public.test.":      ipPublic,
	"api.allowed.test.": ipAllowed,
	"x.wild.test.":      ipWild,
	"denied.test.":      ipRange,
}

// zoneTTL is short: the forwarder opens an allowed name's addresses for it.
const zoneTTL = 30

// serve opens every listener inside the netns (sockets keep the netns they
// were made in) and serves them from ordinary goroutines.
func (x *internet) serve() error {
	var web []net.Listener
	var dnsUDP, counter net.PacketConn
	var dnsTCP net.Listener
	err := podnet.Run(x.nsPath(), func() (err error) {
		for ip := range bodies {
			l, err := x.listen(net.JoinHostPort(ip, "80"))
			if err != nil {
				return err
			}
			web = append(web, l)
		}
		if dnsUDP, err = x.listenPacket(net.JoinHostPort(ipDNS, "53")); err != nil {
			return err
		}
		if dnsTCP, err = x.listen(net.JoinHostPort(ipDNS, "53")); err != nil {
			return err
		}
		counter, err = x.listenPacket(fmt.Sprintf("%s:%d", inetSide, udpPort))
		return err
	})
	if err != nil {
		return err
	}
	x.serveWeb(web)
	for _, srv := range []*dns.Server{{PacketConn: dnsUDP}, {Listener: dnsTCP}} {
		srv.Handler = dns.HandlerFunc(answerDNS)
		go func() { _ = srv.ActivateAndServe() }()
		x.closers = append(x.closers, func() error { _ = srv.Shutdown(); return nil })
	}
	go x.count(counter)
	return nil
}

// listen and listenPacket open a socket teardown closes (its server may
// have closed it first: that error is no news).
func (x *internet) listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp4", addr)
	if err == nil {
		x.closers = append(x.closers, func() error { _ = l.Close(); return nil })
	}
	return l, err
}

func (x *internet) listenPacket(addr string) (net.PacketConn, error) {
	pc, err := net.ListenPacket("udp4", addr)
	if err == nil {
		x.closers = append(x.closers, func() error { _ = pc.Close(); return nil })
	}
	return pc, err
}

// serveWeb answers each web host's body and records every connection
// accepted: when the VM's filter let it through, as the server saw it.
func (x *internet) serveWeb(ls []net.Listener) {
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
			_, _ = io.WriteString(w, bodies[hostOf(local)])
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

func answerDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	qq := q.Question[0]
	ip, ok := zone[strings.ToLower(qq.Name)]
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case qq.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{A: net.ParseIP(ip).To4(),
			Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: zoneTTL}})
	}
	_ = w.WriteMsg(m)
}

// count records every datagram to the counter until its socket closes.
func (x *internet) count(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		x.mu.Lock()
		x.frames = append(x.frames, datagram{payload: string(buf[:n]), from: from.String()})
		x.mu.Unlock()
	}
}

// arrivals are when connections from remote reached the host local,
// oldest first.
func (x *internet) arrivals(local, remote string) []time.Time {
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

// datagrams are the counter's datagrams whose payload starts with tag.
func (x *internet) datagrams(tag string) []datagram {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []datagram
	for _, d := range x.frames {
		if strings.HasPrefix(d.payload, tag+" ") {
			out = append(out, d)
		}
	}
	return out
}

// selfCheck: the host reaches the public web host and the DNS server
// answers, before a cluster depends on them.
func (x *internet) selfCheck() error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := hc.Get("http://" + ipPublic + "/")
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != bodies[ipPublic] {
		return fmt.Errorf("http://%s/ answered %s %q", ipPublic, resp.Status, b)
	}
	q := new(dns.Msg).SetQuestion("public.test.", dns.TypeA)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, _, err := new(dns.Client).ExchangeContext(ctx, q, net.JoinHostPort(ipDNS, "53"))
	if err != nil {
		return fmt.Errorf("DNS at %s: %w", ipDNS, err)
	}
	if a, ok := firstA(r); !ok || a != ipPublic {
		return fmt.Errorf("DNS at %s: public.test is %v", ipDNS, r.Answer)
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

package e2b

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// target is the sandbox and port a proxied request is for.
type target struct {
	id   string
	port int
}

// hostLabel is the first label of a sandbox host name: <port>-<sandboxID>.
var hostLabel = regexp.MustCompile(`^([0-9]{1,5})-([a-z0-9]{20})$`)

// proxyTarget tells sandbox traffic from API calls: the SDK's
// E2B_SANDBOX_URL mode names the sandbox in headers, the domain mode in
// the host name (<port>-<sandboxID>.<domain>).
func (s *Server) proxyTarget(r *http.Request) (target, bool) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port, err := strconv.Atoi(r.Header.Get("E2b-Sandbox-Port"))
		if err != nil {
			port = sandlotv1.EnvdPort
		}
		return target{id: id, port: port}, true
	}
	label, rest, ok := strings.Cut(stripPort(r.Host), ".")
	m := hostLabel.FindStringSubmatch(label)
	if !ok || m == nil || (s.cfg.Domain != "" && rest != stripPort(s.cfg.Domain)) {
		return target{}, false
	}
	port, _ := strconv.Atoi(m[1])
	return target{id: m[2], port: port}, true
}

func stripPort(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// proxy forwards sandbox traffic to the sandbox's pod, streaming both
// ways. Connections to pods are not kept alive: a VM restored in place
// (rollback) or resumed comes back with the TCP state of its snapshot,
// and a pooled connection to it would hang.
type proxy struct {
	s       *Server
	rp      *httputil.ReverseProxy
	streams *streams
	dial    func(ctx context.Context, network, addr string) (net.Conn, error) // tests replace it
}

type targetKey struct{}

// dialPatience is how long a connection to a usable sandbox that is
// refused or not answered is tried again: a VM just restored or resumed
// can take a moment to answer, and a client should not see that as a
// 502 (make soak saw them right after rollbacks). Each attempt gets
// dialAttempt.
const (
	dialPatience = 30 * time.Second
	dialAttempt  = 2 * time.Second
)

// dialPatiently is dial, tried again with a backoff while the address
// refuses or does not answer, for at most patience (and ctx). Nothing
// has been sent on a connection not made: trying again is safe.
func dialPatiently(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), network, addr string, patience time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(patience)
	wait := 25 * time.Millisecond
	for {
		attempt, cancel := context.WithTimeout(ctx, min(dialAttempt, time.Until(deadline)))
		c, err := dial(attempt, network, addr)
		cancel()
		if err == nil || !retryableDial(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// retryableDial: refused, unreachable, or not answered in time.
func retryableDial(err error) bool {
	var ne net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func newProxy(s *Server) *proxy {
	p := &proxy{s: s, streams: newStreams(), dial: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialPatiently(ctx, p.dial, network, addr, dialPatience)
		},
		DisableKeepAlives:   true,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	rp := &httputil.ReverseProxy{
		Transport:     transport,
		FlushInterval: -1, // Connect streams and NDJSON: every write at once
		// Before Rewrite, httputil drops the hop-by-hop headers (those
		// Connection names, Proxy-Authorization, ...) and X-Forwarded-For,
		// -Host and -Proto; none is set again.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(pr.In.Context().Value(targetKey{}).(*url.URL))
			pr.Out.Host = pr.In.Host
			if host, ok := pr.In.Context().Value(maskKey{}).(string); ok {
				pr.Out.Host = host // maskhost.go
			}
			port, _ := strconv.Atoi(pr.Out.URL.Port())
			stripCredentials(pr.Out.Header, port)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, errorf(http.StatusBadGateway, "sandbox unreachable: %v", err))
		},
	}
	p.rp = rp
	return p
}

// serve checks the access token, resumes a paused sandbox that asked for
// it when the request may wake it (a paused one else answers 502, as
// E2B's does) and forwards.
func (p *proxy) serve(w http.ResponseWriter, r *http.Request, t target) {
	clearDeadlines(w)
	sbx, err := p.s.sandbox(r.Context(), t.id, false)
	if err != nil {
		p.refuse(w, "unavailable", errorf(http.StatusBadGateway, "sandbox %q not found", t.id))
		return
	}
	if err := p.s.checkAccess(r, sbx, t.port); err != nil {
		p.refuse(w, "refused", err)
		return
	}
	if sbx, err = p.s.settle(r.Context(), sbx); err != nil {
		p.refuse(w, "unavailable", err)
		return
	}
	if paused(sbx) {
		if sbx.Annotations[AnnotationAutoResume] != "true" || !p.s.mayResume(r, sbx, t.port) {
			p.refuse(w, "unavailable", errorf(http.StatusBadGateway, "sandbox %q is paused: connect to it to resume it", t.id))
			return
		}
		// A wake is a resume of the sandbox's team: its operation rate.
		if secs := charge(w, p.s.operations, sbx.Namespace, 1); secs > 0 {
			p.refuse(w, "limited", errorf(http.StatusTooManyRequests, "sandbox %q is paused and its team's resumes are rate limited; retry in %d s", t.id, secs))
			return
		}
		if sbx, err = p.s.autoResume(r.Context(), sbx); err != nil {
			p.refuse(w, "unavailable", err)
			return
		}
		proxied.WithLabelValues("resumed").Inc()
	}
	if sbx.Status.PodIP == "" {
		p.refuse(w, "unavailable", errorf(http.StatusBadGateway, "sandbox %q is not running yet (%s)", t.id, sbx.Status.Phase))
		return
	}
	proxied.WithLabelValues("forwarded").Inc()
	// Full duplex: by default an HTTP/1 server consumes and closes what is
	// left of the request body when the response head goes out, while the
	// transport may still be copying that body to the pod; the transport
	// then closes the pod connection and the reply is cut after its head.
	// A pod that answers before it read everything (a stream's head, the
	// interpreter's first line) would race it. HTTP/2 is full duplex anyway.
	_ = http.NewResponseController(w).EnableFullDuplex()
	u := &url.URL{Scheme: "http", Host: net.JoinHostPort(sbx.Status.PodIP, strconv.Itoa(t.port))}
	ctx, cancel := context.WithCancel(withMask(context.WithValue(r.Context(), targetKey{}, u), sbx, t.port))
	defer cancel()
	// A change of the sandbox between its read above and this add is not
	// seen by the streams: a request to a pod that went meanwhile fails
	// its dial instead. Comparing with the cache here would cut requests
	// settle read past a cache that is behind.
	defer p.streams.add(sbx, cancel)()
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

func (p *proxy) refuse(w http.ResponseWriter, outcome string, err *apiError) {
	proxied.WithLabelValues(outcome).Inc()
	writeError(w, err)
}

// checkAccess: envd's and the interpreter's ports need the sandbox's
// own token (a pre-signed /files URL carries its signature instead,
// which envd checks); other ports are public, as on E2B, unless the
// sandbox's traffic is private (checkTraffic).
func (s *Server) checkAccess(r *http.Request, sbx *sandlotv1.Sandbox, port int) *apiError {
	if err := s.checkTraffic(r, sbx, port); err != nil {
		return err
	}
	if !agentPort(port) {
		return nil
	}
	if r.URL.Path == "/files" && r.URL.Query().Get("signature") != "" && r.Header.Get("X-Access-Token") == "" {
		return nil
	}
	want := s.token(r.Context(), sbx)
	contextAccess(r, port, want)
	if want == "" || !sameSecret(r.Header.Get("X-Access-Token"), want) {
		return errorf(http.StatusUnauthorized, "invalid or missing X-Access-Token for sandbox %q", sandlotv1.SandboxIDFor(sbx.UID))
	}
	return nil
}

// contextAccess lets the code interpreter's context routes (/contexts
// and below) in on the sandbox's traffic access token, the only token the
// code-interpreter SDK sends there (its /execute sends X-Access-Token
// too): a request with no X-Access-Token and a valid traffic token goes
// on with the sandbox's own envd token, which the interpreter checks. The
// traffic token is given only with the envd token (create, connect) and
// opens only this sandbox's contexts; running code needs the envd token.
func contextAccess(r *http.Request, port int, envdToken string) {
	path := r.URL.Path
	if port != sandlotv1.CodeInterpreterPort || envdToken == "" || r.Header.Get("X-Access-Token") != "" ||
		(path != "/contexts" && !strings.HasPrefix(path, "/contexts/")) {
		return
	}
	if sameSecret(r.Header.Get(trafficTokenHeader), trafficToken(envdToken)) {
		r.Header.Set("X-Access-Token", envdToken)
	}
}

// mayResume: traffic to a port of a paused sandbox its creator asked to
// auto-resume wakes it, as on E2B: on its own ports (envd, the
// interpreter) a request holding its envd token (X-Access-Token, as envd
// would accept it); on its other ports any request that reaches them —
// one with the traffic token when its traffic is private (checkTraffic),
// anyone with the URL when it is public, which is what autoResume with
// public traffic means on E2B (wakes are charged to the team's operation
// rate). A sandbox without a token resumes on its own ports only for a
// request with a valid API key of its team.
func (s *Server) mayResume(r *http.Request, sbx *sandlotv1.Sandbox, port int) bool {
	if !agentPort(port) {
		return true // checkAccess let it in: public, or the traffic token
	}
	want := s.token(r.Context(), sbx)
	if want == "" {
		if r.Header.Get("X-API-KEY") == "" {
			return false
		}
		team, err := s.authorize(r)
		return err == nil && team == sbx.Namespace
	}
	return sameSecret(r.Header.Get("X-Access-Token"), want)
}

// sameSecret compares in constant time, lengths included (hashes of
// equal length).
func sameSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return got != "" && subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// settle is sbx as the proxy forwards to it. One on its way to running
// — resuming, starting, moved by a drain — is waited for instead of
// refused (a client reconnects through here). One the cache says is
// paused is first read past the cache: a `kubectl sandlot resume
// --wait` that just returned to a client now calling it must not get
// "paused" from a cache a moment behind (found by make soak).
func (s *Server) settle(ctx context.Context, sbx *sandlotv1.Sandbox) (*sandlotv1.Sandbox, *apiError) {
	if paused(sbx) && sbx.Annotations[AnnotationAutoResume] != "true" {
		live := &sandlotv1.Sandbox{}
		if err := s.kube.direct.Get(ctx, client.ObjectKeyFromObject(sbx), live); err == nil {
			sbx = live
		}
	}
	if paused(sbx) || sbx.Usable(sbx.Generation) || sbx.Status.Phase.Terminal() || sbx.DeletionTimestamp != nil {
		return sbx, nil
	}
	outcome := "held"
	if moving(sbx) {
		outcome = "moved"
	}
	ready, err := s.waitUsable(ctx, sbx.Namespace, sbx.Name, sbx.Generation)
	if err != nil {
		return nil, err
	}
	proxied.WithLabelValues(outcome).Inc()
	return ready, nil
}

// autoResume resumes a paused sandbox for the traffic that reached it.
func (s *Server) autoResume(ctx context.Context, sbx *sandlotv1.Sandbox) (*sandlotv1.Sandbox, *apiError) {
	if sbx.Spec.Paused {
		if err := s.patchSpec(ctx, sbx, map[string]any{"paused": false}); err != nil {
			return nil, err
		}
	}
	return s.waitUsable(ctx, sbx.Namespace, sbx.Name, sbx.Generation)
}

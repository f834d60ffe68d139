package e2b

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// Timeouts of sandlot-api's listeners. One listener carries both the REST
// API and the sandbox proxy, and the proxy carries envd's Connect streams
// (a process's output, a watch) and WebSockets that live as long as the
// client wants: a server-wide ReadTimeout or WriteTimeout would cut them.
// So the listener bounds only what every request shares (its headers, the
// wait between requests) and the REST API bounds each of its own calls
// (Server.apiDeadlines).
const (
	// ReadHeaderTimeout is how long a client has to send a request's
	// headers (and a TLS handshake): a connection that dribbles them (slow
	// loris) is closed then. The SDKs send theirs at once.
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes a keep-alive connection that has no request in
	// flight, so that idle clients do not hold sockets forever.
	IdleTimeout = 2 * time.Minute
	// MetricsTimeout bounds a whole request to the metrics listener, which
	// never streams: a scrape is small and quick.
	MetricsTimeout = 30 * time.Second
	// apiBodyTimeout is how long a REST request's body (at most
	// Config.MaxBodyBytes, 1 MiB by default) may take to arrive.
	apiBodyTimeout = 30 * time.Second
	// apiSlack is added to the longest wait of a REST call for what comes
	// around it: cache reads, deleting a failed create's sandbox (up to
	// 30 s), writing the answer.
	apiSlack = time.Minute
)

// Timeouts shape an http.Server; zero fields are no bound.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// ProxyTimeouts are those of the API and proxy listeners: no Read or
// Write bound, for the streams (see the constants).
var ProxyTimeouts = Timeouts{ReadHeader: ReadHeaderTimeout, Idle: IdleTimeout}

// NewHTTPServer is an http.Server for sandlot-api's listeners with
// timeouts t (tests inject short ones).
func NewHTTPServer(addr string, h http.Handler, t Timeouts) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read,
		WriteTimeout: t.Write, IdleTimeout: t.Idle}
}

// apiTimeout bounds a whole REST call: its longest wait is a fork's
// snapshot and then its creates, or a pause.
func (s *Server) apiTimeout() time.Duration {
	return max(s.cfg.SnapshotTimeout+s.cfg.CreateTimeout, s.cfg.PauseTimeout) + apiSlack
}

// apiDeadlines bounds a REST call on its connection: its body must arrive
// within apiBodyTimeout, its answer be written within apiTimeout. Once the
// body is read the read deadline moves to the end of the call too: the
// server then reads on in the background to notice a client that hangs
// up, and a read deadline passing there would cancel the call's context
// while it still waits for a VM.
func (s *Server) apiDeadlines(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	end := time.Now().Add(s.apiTimeout())
	// Errors only mean the connection cannot take deadlines (a test's
	// recorder): the call then runs unbounded, as before.
	_ = rc.SetWriteDeadline(end)
	if r.Body == nil || r.Body == http.NoBody {
		_ = rc.SetReadDeadline(end)
		return
	}
	_ = rc.SetReadDeadline(time.Now().Add(min(apiBodyTimeout, s.apiTimeout())))
	r.Body = &bodyDone{ReadCloser: r.Body, done: func() { _ = rc.SetReadDeadline(end) }}
}

// clearDeadlines lifts what an earlier REST call on the same keep-alive
// connection set (net/http resets the read deadline per request, but not
// the write deadline): a proxied stream runs as long as it needs.
func clearDeadlines(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}

// bodyDone calls done once, when the body ends. Not on an error or a
// Close: a body cut short keeps its short deadline for what the server
// still discards of it.
type bodyDone struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *bodyDone) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.done)
	}
	return n, err
}

// Package httpserve builds the HTTP servers the guest agent listens with
// (the envd API on 49983, the code interpreter on 49999), so that no
// client can hold a connection open by never finishing a request.
//
// There is no server-wide ReadTimeout or WriteTimeout, on purpose: the
// envd API serves Connect streams (process output, filesystem watches)
// and /files transfers, and the interpreter streams a cell's output, all
// legitimately as long as the user wants. A WriteTimeout would cut them,
// and a ReadTimeout does too: once it passes while a handler still runs,
// net/http's background read fails and cancels the request's context.
// What is bounded instead:
//
//   - the request headers (ReadHeaderTimeout): the slow-loris attack,
//     which needs no token, is closed there;
//   - the wait for a keep-alive connection's next request (IdleTimeout);
//   - a refused request's body (Refuse): a caller without the token cannot
//     hold the connection by dribbling a body the server would drain;
//   - whole non-streaming requests, per handler (Deadline).
package httpserve

import (
	"net/http"
	"time"
)

const (
	// ReadHeaderTimeout bounds reading a request line and headers. The
	// SDKs send them in one write, from the node's network: a client that
	// has not finished them after 10 s is stuck or hostile, and this is
	// the only bound on a connection before its caller is authenticated.
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes a keep-alive connection waiting for its next
	// request. It is above the clients' own idle limits (Go's default
	// Transport 90 s, undici's keep-alive 4 s), so a client drops an idle
	// connection first and does not race the server's close on reuse.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds a request's headers: the SDKs send under
	// 2 KiB; 64 KiB leaves room for long paths and cookies from proxies
	// while keeping what an unauthenticated client can make us buffer
	// small (net/http's default is 1 MiB).
	MaxHeaderBytes = 64 << 10
	// RefusedBodyGrace is how long the body of a refused request may
	// still take to arrive (net/http drains up to 256 KiB of it after the
	// reply): a client with a wrong token has sent its small body already,
	// one sending it slowly to hold the connection is cut after this.
	RefusedBodyGrace = time.Second
	// ShortRequestTimeout bounds a whole non-streaming request (see
	// Deadline): small JSON in and out, at most a python kernel to start
	// or restart (the interpreter allows 20 s for a start, 5 s for an
	// interrupt), with room for TCG emulation being slow.
	ShortRequestTimeout = time.Minute
)

// Timeouts are a server's connection-level bounds; tests inject short ones.
type Timeouts struct {
	ReadHeader time.Duration
	Idle       time.Duration
}

// DefaultTimeouts are the bounds New uses.
var DefaultTimeouts = Timeouts{ReadHeader: ReadHeaderTimeout, Idle: IdleTimeout}

// New returns the server for one of the guest's HTTP APIs at addr.
func New(addr string, h http.Handler) *http.Server {
	return NewWithTimeouts(addr, h, DefaultTimeouts)
}

// NewWithTimeouts is New with other connection bounds (tests).
func NewWithTimeouts(addr string, h http.Handler, t Timeouts) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    MaxHeaderBytes,
		// ReadTimeout and WriteTimeout stay 0: see the package comment.
	}
}

// Refuse prepares w for a refusal (401 and the like), before its header
// is written: the connection closes after the reply, so net/http does
// not drain a large body for a caller it refused, and the rest of the
// body gets RefusedBodyGrace to arrive, so a slow one cannot hold the
// connection either.
func Refuse(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	setDeadlines(w, time.Now().Add(RefusedBodyGrace), false)
}

// Deadline bounds a non-streaming handler: its request body must be read
// and its reply written within d, and its context ends then (net/http
// cancels it when the read deadline passes). Never wrap a streaming
// route with it.
func Deadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setDeadlines(w, time.Now().Add(d), true)
		next.ServeHTTP(w, r)
	})
}

// setDeadlines sets the connection's read (and write) deadline. Errors
// are ignored: a writer without deadlines (a test's ResponseRecorder)
// stays unbounded rather than failing the request, and a closed
// connection fails the handler's first read or write anyway.
func setDeadlines(w http.ResponseWriter, at time.Time, write bool) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(at)
	if write {
		_ = rc.SetWriteDeadline(at)
	}
}

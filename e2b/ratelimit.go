package e2b

import (
	"crypto/sha256"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// sweepEvery is how often the create limiter forgets the buckets of keys
// that stopped creating.
const sweepEvery = time.Minute

// createLimiter is a token bucket per API key for the calls that create
// sandboxes (each boots a VM, holds a node's memory and CPU): a key may
// create rate sandboxes a second on average and burst at once. Written
// here rather than taken from golang.org/x/time/rate, which the module
// only has indirectly, and which refuses outright what asks for more than
// the burst (a large fork).
type createLimiter struct {
	rate, burst float64
	now         func() time.Time

	mu      sync.Mutex
	buckets map[[sha256.Size]byte]*bucket // by the key's hash: no key kept in clear
	swept   time.Time
}

// bucket is a key's tokens as counted at.
type bucket struct {
	tokens float64
	at     time.Time
}

func newCreateLimiter(rate float64, burst int, now func() time.Time) *createLimiter {
	return &createLimiter{rate: rate, burst: float64(burst), now: now, buckets: map[[sha256.Size]byte]*bucket{}, swept: now()}
}

// take takes n tokens from key's bucket, or none and says how long until
// the bucket holds them. A fork of more than the burst waits for a full
// bucket and leaves it in debt: it is not refused forever, and the key's
// average rate still holds.
func (l *createLimiter) take(key string, n int) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	id := sha256.Sum256([]byte(key))
	b := l.buckets[id]
	if b == nil {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[id] = b
	}
	b.tokens, b.at = l.refilled(b, now), now
	need := min(float64(n), l.burst)
	if b.tokens < need {
		return time.Duration((need - b.tokens) / l.rate * float64(time.Second)), false
	}
	b.tokens -= float64(n)
	return 0, true
}

func (l *createLimiter) refilled(b *bucket, now time.Time) float64 {
	return min(l.burst, b.tokens+max(0, now.Sub(b.at).Seconds())*l.rate)
}

// sweep forgets the buckets that are full again: a full bucket is what a
// key without one gets, so the map holds only the keys that created in
// the last burst/rate seconds (plus a sweep interval), not every key ever
// seen.
func (l *createLimiter) sweep(now time.Time) {
	if now.Sub(l.swept) < sweepEvery {
		return
	}
	l.swept = now
	for id, b := range l.buckets {
		if l.refilled(b, now) >= l.burst {
			delete(l.buckets, id)
		}
	}
}

func (l *createLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// allowCreate charges n sandbox creates to the request's API key (the
// mux is reached only with a valid one): a 429 with Retry-After, in whole
// seconds, when its bucket holds too few.
func (s *Server) allowCreate(w http.ResponseWriter, r *http.Request, n int) *apiError {
	if secs := charge(w, s.creates, r.Header.Get("X-API-KEY"), n); secs > 0 {
		return errorf(http.StatusTooManyRequests, "rate limit: an API key may create %g sandboxes a second, %d at once; retry in %d s",
			s.cfg.CreateRate, s.cfg.CreateBurst, secs)
	}
	return nil
}

// charge takes n from key's bucket of l (nil: no limit). When it holds
// too few it sets Retry-After and returns the whole seconds to wait; 0
// means allowed.
func charge(w http.ResponseWriter, l *createLimiter, key string, n int) int64 {
	if l == nil {
		return 0
	}
	wait, ok := l.take(key, n)
	if ok {
		return 0
	}
	secs := max(1, int64(math.Ceil(wait.Seconds())))
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return secs
}

// allowOperation charges one heavy operation of the request's team: a
// snapshot, a pause, a resume (not a connect to a running sandbox) or a
// template build's request or start, each of which writes memory or a
// disk to the node and the store. A 429 with Retry-After, naming the
// limit, when the team's bucket is empty.
func (s *Server) allowOperation(w http.ResponseWriter, r *http.Request, what string) *apiError {
	if secs := charge(w, s.operations, teamOf(r.Context()), 1); secs > 0 {
		return errorf(http.StatusTooManyRequests, "rate limit on %s: a team may snapshot, pause, resume and build %g times a second, "+
			"%d at once (sandlot-api --operation-rate, --operation-burst); retry in %d s", what, s.cfg.OperationRate, s.cfg.OperationBurst, secs)
	}
	return nil
}

// Package poll is the one way tests and tooling (the local cluster, the CRI
// environment) wait for a condition nothing signals: call a function until
// it returns nil, with a deadline, and fail naming what was awaited and the
// last reason it was not so. Tests use Eventually and Consistently; code that
// returns errors uses Until, Within or Every. It imports nothing of sandlot,
// so every package may use it.
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Polls start this far apart and back off to maxInterval: a condition
// that is almost true costs a unit test little, one that takes minutes
// (polled through kubectl or envd under TCG, on two cores) does not load
// the host more than the cluster suites always did.
const (
	firstInterval = 10 * time.Millisecond
	maxInterval   = 250 * time.Millisecond
)

// TB is what Eventually and Consistently need of a test: *testing.T and
// crienv.T have it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually calls f until it returns nil, failing t with what and f's
// last error once timeout has passed (or at once with the error f wraps
// in Stop).
func Eventually(t TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	if err := Within(timeout, what, f); err != nil {
		t.Fatalf("%v", err)
	}
}

// Consistently calls f for d, failing t the first time it returns an
// error: for what must not happen (a placement, a deletion) while the
// system has every chance to do it.
func Consistently(t TB, d time.Duration, what string, f func() error) {
	t.Helper()
	start := time.Now()
	end := start.Add(d)
	for next := backoff(); ; {
		if err := f(); err != nil {
			t.Fatalf("%s: %v (after %v of %v)", what, err, time.Since(start).Round(time.Millisecond), d)
		}
		left := time.Until(end)
		if left <= 0 {
			return
		}
		time.Sleep(min(next(), left))
	}
}

// Within is Until with a timeout.
func Within(timeout time.Duration, what string, f func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Until(ctx, what, f)
}

// Until calls f until it returns nil (Until returns nil), f returns an
// error wrapped in Stop (Until returns that error), or ctx ends (Until
// returns an error naming what and wrapping f's last error and ctx's).
func Until(ctx context.Context, what string, f func() error) error {
	return run(ctx, what, backoff(), f)
}

// Every is Until polling at a fixed interval: for a wait that times what
// it waits for (a benchmark's restore to first answer), which the backoff
// would blur, or whose check is costly (a snapshot of the host's state).
func Every(ctx context.Context, interval time.Duration, what string, f func() error) error {
	return run(ctx, what, func() time.Duration { return interval }, f)
}

// Stop wraps err so that Until, Within, Every and Eventually end at once
// with it: the condition can no longer come true (the process exited, the
// object Failed).
func Stop(err error) error { return stopError{err} }

type stopError struct{ err error }

func (e stopError) Error() string { return e.err.Error() }

func run(ctx context.Context, what string, next func() time.Duration, f func() error) error {
	start := time.Now()
	for {
		err := f()
		if err == nil {
			return nil
		}
		var s stopError
		if errors.As(err, &s) {
			return s.err
		}
		timer := time.NewTimer(next())
		select {
		case <-ctx.Done():
			timer.Stop()
			return &timeoutError{what: what, after: waited(ctx, start), last: err, ctx: ctx.Err()}
		case <-timer.C:
		}
	}
}

// backoff returns the intervals between polls: doubling from
// firstInterval up to maxInterval.
func backoff() func() time.Duration {
	d := firstInterval / 2
	return func() time.Duration {
		d = min(2*d, maxInterval)
		return d
	}
}

// waited is the timeout when ctx has a deadline, else the time spent.
func waited(ctx context.Context, start time.Time) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return dl.Sub(start).Round(time.Millisecond)
	}
	return time.Since(start).Round(time.Millisecond)
}

// timeoutError says what was not so in time and why (f's last error); it
// wraps that error and ctx's, for errors.Is.
type timeoutError struct {
	what  string
	after time.Duration
	last  error
	ctx   error
}

func (e *timeoutError) Error() string {
	if errors.Is(e.ctx, context.DeadlineExceeded) {
		return fmt.Sprintf("%s: not after %v: %v", e.what, e.after, e.last)
	}
	return fmt.Sprintf("%s: %v after %v: %v", e.what, e.ctx, e.after, e.last)
}

func (e *timeoutError) Unwrap() []error { return []error{e.last, e.ctx} }

package poll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	err := Within(5*time.Second, "three calls", func() error {
		if n++; n < 3 {
			return fmt.Errorf("call %d", n)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Within = %v after %d calls, want nil after 3", err, n)
	}
}

func TestUntilTimeout(t *testing.T) {
	last := errors.New("not yet")
	err := Within(50*time.Millisecond, "never", func() error { return last })
	if !errors.Is(err, last) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Within = %v, want it to wrap f's error and the deadline", err)
	}
	if got, want := err.Error(), "never: not after 50ms: not yet"; got != want {
		t.Fatalf("error %q, want %q", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Until(ctx, "canceled", func() error { return last }); !errors.Is(err, context.Canceled) ||
		!strings.HasPrefix(err.Error(), "canceled: context canceled after ") {
		t.Fatalf("Until on a canceled context = %v", err)
	}
}

func TestStop(t *testing.T) {
	gone := errors.New("the process exited")
	n := 0
	err := Within(5*time.Second, "stopped", func() error {
		n++
		return fmt.Errorf("wrapped: %w", Stop(gone))
	})
	if err != gone || n != 1 {
		t.Fatalf("Within = %v after %d calls, want Stop's error after 1", err, n)
	}
}

func TestEvery(t *testing.T) {
	var at []time.Time
	err := Every(context.Background(), 30*time.Millisecond, "every", func() error {
		if at = append(at, time.Now()); len(at) < 3 {
			return errors.New("again")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := at[2].Sub(at[0]); d < 60*time.Millisecond {
		t.Fatalf("3 calls within %v, want them 30 ms apart", d)
	}
}

// fakeT records Fatalf and ends the calling goroutine as testing.T does.
type fakeT struct{ msg string }

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func fails(fn func(t TB)) (msg string) {
	f := &fakeT{}
	defer func() {
		if p := recover(); p != nil && p != f {
			panic(p)
		}
		msg = f.msg
	}()
	fn(f)
	return ""
}

func TestEventuallyAndConsistently(t *testing.T) {
	if msg := fails(func(t TB) { Eventually(t, 20*time.Millisecond, "thing", func() error { return errors.New("no") }) }); msg != "thing: not after 20ms: no" {
		t.Errorf("Eventually failed with %q", msg)
	}
	if msg := fails(func(t TB) { Eventually(t, time.Second, "thing", func() error { return nil }) }); msg != "" {
		t.Errorf("Eventually of a true condition failed: %q", msg)
	}
	n := 0
	start := time.Now()
	if msg := fails(func(t TB) { Consistently(t, 100*time.Millisecond, "holds", func() error { n++; return nil }) }); msg != "" || n < 2 {
		t.Errorf("Consistently of a true condition: %q after %d calls", msg, n)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("Consistently returned after %v, before its 100 ms", el)
	}
	n = 0
	msg := fails(func(t TB) {
		Consistently(t, 5*time.Second, "holds", func() error {
			if n++; n == 3 {
				return errors.New("broke")
			}
			return nil
		})
	})
	if !strings.HasPrefix(msg, "holds: broke (after ") || n != 3 {
		t.Errorf("Consistently failed with %q after %d calls", msg, n)
	}
}

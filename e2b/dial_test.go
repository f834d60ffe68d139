package e2b

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestDialPatiently: a refused or unanswered dial is tried again until
// it connects or the patience ends; another error is returned at once.
func TestDialPatiently(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	refusals := 0
	refusing := func(n int) func(context.Context, string, string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refusals < n {
				refusals++
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
	}
	c, err := dialPatiently(context.Background(), refusing(3), "tcp", ln.Addr().String(), 5*time.Second)
	if err != nil || refusals != 3 {
		t.Fatalf("after 3 refusals: %v (%d refusals)", err, refusals)
	}
	c.Close()

	refusals = 0
	start := time.Now()
	if _, err := dialPatiently(context.Background(), refusing(1000), "tcp", ln.Addr().String(), 300*time.Millisecond); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("refused for good: %v, want ECONNREFUSED", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("gave up after %v, patience 300ms", d)
	}

	hangs := 0
	hanging := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if hangs < 2 {
			hangs++
			<-ctx.Done() // a SYN nobody answers: the attempt's own timeout ends it
			return nil, ctx.Err()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	if c, err := dialPatiently(context.Background(), hanging, "tcp", ln.Addr().String(), 30*time.Second); err != nil || hangs != 2 {
		t.Fatalf("after 2 unanswered attempts: %v (%d)", err, hangs)
	} else {
		c.Close()
	}

	calls := 0
	other := func(context.Context, string, string) (net.Conn, error) { calls++; return nil, fmt.Errorf("no route") }
	if _, err := dialPatiently(context.Background(), other, "tcp", "10.0.0.1:1", 5*time.Second); err == nil || calls != 1 {
		t.Fatalf("another error: %v after %d calls, want it at once", err, calls)
	}
}

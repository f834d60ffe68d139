package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
)

// The tests run a Handler in the test process and talk to it with the
// host's Client, over each transport the guest serves.

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 10}))
}

func newHandler(t *testing.T, opts Options) *Handler {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	h := NewHandler(&identity.Store{}, opts)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// transports connect a Client to a Handler: over a real unix socket the
// guest listens on (Serve), and over a net.Pipe.
var transports = map[string]func(t *testing.T, h *Handler) *control.Client{
	"socket": socketClient,
	"pipe":   pipeClient,
}

// serveSocketT starts Serve on a fresh socket path and returns the path.
func serveSocketT(t *testing.T, h *Handler) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "control.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, path, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Serve: %v", err)
		}
	})
	return path
}

func dial(t *testing.T, path string) *control.Client {
	t.Helper()
	c, err := control.Dial(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func socketClient(t *testing.T, h *Handler) *control.Client {
	return dial(t, serveSocketT(t, h))
}

func pipeClient(t *testing.T, h *Handler) *control.Client {
	t.Helper()
	guestEnd, hostEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = NewServerConn(guestEnd, h).Serve(ctx); close(done) }()
	c := control.NewClient(hostEnd)
	t.Cleanup(func() { _ = c.Close(); cancel(); <-done })
	return c
}

// groupSize counts the processes in process group pgid (from /proc).
func groupSize(pgid int) int {
	dirs, _ := os.ReadDir("/proc")
	n := 0
	for _, d := range dirs {
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue // not a process, or gone
		}
		// After the command name, which may hold spaces and parentheses:
		// state, ppid, pgrp.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			n++
		}
	}
	return n
}

func forEachTransport(t *testing.T, test func(t *testing.T, c *control.Client, h *Handler)) {
	for name, connect := range transports {
		t.Run(name, func(t *testing.T) {
			h := newHandler(t, Options{})
			test(t, connect(t, h), h)
		})
	}
}

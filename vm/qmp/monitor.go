package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// maxLineSize bounds one JSON line from QEMU. Real replies are at most a
	// few hundred KiB (query-qmp-schema); the bound keeps a broken peer from
	// making us buffer without limit.
	maxLineSize = 16 << 20
	// eventBuffer is how many events Events() holds before the oldest are dropped.
	eventBuffer = 256
	// dialMaxDelay caps the retry interval while QEMU creates its socket.
	dialMaxDelay = 20 * time.Millisecond
)

// Version is QEMU's version as announced in the QMP greeting.
type Version struct {
	Major, Minor, Micro int
	// Package is the distribution's build string, e.g. "Debian 1:7.2+dfsg-7+deb12u18+b3".
	Package string
}

// String returns "major.minor.micro", e.g. "7.2.22".
func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)
}

// AtLeast reports whether v is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// Monitor is one QMP connection. All methods are safe for concurrent use.
type Monitor struct {
	conn    *net.UnixConn
	version Version
	nextID  atomic.Uint64

	writeMu sync.Mutex // one command line on the wire at a time
	fdMu    sync.Mutex // one getfd in flight, so QEMU pairs each fd with its command

	mu         sync.Mutex
	closed     bool
	closeCause error // set by abort; preferred over the reader's own error
	pending    map[uint64]chan reply
	waiters    map[*EventWaiter]struct{}

	events  chan Event
	dropped atomic.Uint64
	skipped atomic.Uint64

	done chan struct{}
	err  error // written once before done is closed
}

type reply struct {
	ret json.RawMessage
	err *Error
}

// Dial connects to QEMU's QMP socket at socketPath, reads the greeting and
// negotiates capabilities. While the socket does not exist yet or refuses
// connections (QEMU is still starting) it retries until ctx ends.
// ctx bounds only the connection setup, not the Monitor's lifetime.
func Dial(ctx context.Context, socketPath string) (*Monitor, error) {
	conn, err := dialRetry(ctx, socketPath)
	if err != nil {
		return nil, err
	}
	m, err := handshake(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("qmp: handshake on %s: %w", socketPath, err)
	}
	return m, nil
}

// Connect speaks QMP over conn, a connection to QEMU's QMP socket the
// caller made (vm dials it beneath the VM's run directory, which QEMU can
// write): it reads the greeting and negotiates capabilities. It owns conn:
// on error conn is closed. ctx bounds only the handshake.
func Connect(ctx context.Context, conn *net.UnixConn) (*Monitor, error) {
	m, err := handshake(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("qmp: handshake: %w", err)
	}
	return m, nil
}

func dialRetry(ctx context.Context, path string) (*net.UnixConn, error) {
	var d net.Dialer
	delay := time.Millisecond
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			if uc, ok := c.(*net.UnixConn); ok {
				return uc, nil
			}
			c.Close()
			return nil, fmt.Errorf("qmp: dial %s: unexpected connection type %T", path, c)
		}
		// ENOENT: QEMU has not bound the socket yet. ECONNREFUSED: the file
		// exists but nobody listens (yet, or a stale file being replaced).
		starting := errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
		if !starting || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("qmp: dial %s: %w (last error: %v)", path, context.Cause(ctx), err)
			}
			return nil, fmt.Errorf("qmp: dial %s: %w", path, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("qmp: dial %s: %w (last error: %v)", path, context.Cause(ctx), err)
		case <-t.C:
		}
		delay = min(delay*2, dialMaxDelay)
	}
}

// handshake reads the greeting, starts the reader and sends qmp_capabilities.
// It owns conn: on error conn is closed.
func handshake(ctx context.Context, conn *net.UnixConn) (*Monitor, error) {
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineSize)

	// Closing the conn is the only way to interrupt a blocked read on ctx end.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	v, err := readGreeting(sc)
	if !stop() {
		err = context.Cause(ctx)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	m := &Monitor{
		conn:    conn,
		version: v,
		pending: make(map[uint64]chan reply),
		waiters: make(map[*EventWaiter]struct{}),
		events:  make(chan Event, eventBuffer),
		done:    make(chan struct{}),
	}
	go m.readLoop(sc)
	if err := m.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

type greeting struct {
	QMP *struct {
		Version struct {
			QEMU struct {
				Major int `json:"major"`
				Minor int `json:"minor"`
				Micro int `json:"micro"`
			} `json:"qemu"`
			Package string `json:"package"`
		} `json:"version"`
	} `json:"QMP"`
}

func readGreeting(sc *bufio.Scanner) (Version, error) {
	if !sc.Scan() {
		err := sc.Err()
		if err == nil {
			err = errors.New("EOF before greeting")
		}
		return Version{}, fmt.Errorf("read greeting: %w", err)
	}
	var g greeting
	if err := json.Unmarshal(sc.Bytes(), &g); err != nil || g.QMP == nil {
		return Version{}, fmt.Errorf("not a QMP greeting: %q", truncate(sc.Bytes(), 200))
	}
	q := g.QMP.Version.QEMU
	return Version{Major: q.Major, Minor: q.Minor, Micro: q.Micro, Package: g.QMP.Version.Package}, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// Version returns QEMU's version from the greeting.
func (m *Monitor) Version() Version { return m.version }

// Done is closed once the connection is gone (QEMU exited, EOF, protocol
// error or Close). Err then tells why.
func (m *Monitor) Done() <-chan struct{} { return m.done }

// Err returns nil while the monitor is open, then an error wrapping ErrClosed
// and the cause.
func (m *Monitor) Err() error {
	select {
	case <-m.done:
		return m.err
	default:
		return nil
	}
}

// DroppedEvents counts events discarded because Events() was not drained.
func (m *Monitor) DroppedEvents() uint64 { return m.dropped.Load() }

// SkippedLines counts lines from QEMU that were ignored: malformed JSON,
// unknown message shapes and replies nobody waits for any more.
func (m *Monitor) SkippedLines() uint64 { return m.skipped.Load() }

// Close closes the connection; pending calls fail with ErrClosed. It does not
// stop QEMU (see Quit). Close is idempotent and returns once the reader ended.
func (m *Monitor) Close() error {
	m.abort(errClosedByClient)
	<-m.done
	return nil
}

// abort records why the connection is being torn down and closes it; the
// reader goroutine then notices and performs the shutdown.
func (m *Monitor) abort(cause error) {
	m.mu.Lock()
	if m.closeCause == nil {
		m.closeCause = cause
	}
	m.mu.Unlock()
	m.conn.Close()
}

// shutdown runs once, on the reader goroutine, when reading stopped.
func (m *Monitor) shutdown(readErr error) {
	m.mu.Lock()
	cause := m.closeCause
	if cause == nil {
		cause = readErr
	}
	m.closed = true
	m.pending = nil // waiters select on done; they need no message
	m.waiters = nil
	m.err = fmt.Errorf("%w: %w", ErrClosed, cause)
	m.mu.Unlock()
	m.conn.Close()
	close(m.done)
	close(m.events) // the reader is the only sender, so this is safe here
}

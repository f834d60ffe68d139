package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/sandlot-dev/sandlot/guest/identity"
)

// ErrClosed is returned by calls on a Client whose connection has ended.
var ErrClosed = errors.New("control: connection closed")

// stdinChunk is the largest writeStdin the Client sends in one frame.
const stdinChunk = 1 << 20

// Client is the host side of the control channel. It is safe for
// concurrent use; every call honours its context (a canceled call is also
// canceled in the guest).
type Client struct {
	rwc io.ReadWriteCloser
	fw  FrameWriter

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	err     error // why the connection ended

	subs subscriptions

	done      chan struct{}
	closeOnce sync.Once
}

type call struct {
	ch chan Frame
	// onReply runs on the reader, before any later frame is dispatched.
	onReply func(Frame)
}

// Dial connects to a control socket: QEMU's chardev socket of a VM's
// virtio-serial port, or a guest agent serving a socket (server.Serve). It
// retries while the socket does not exist yet or refuses, until ctx ends.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return NewClient(conn), nil
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("control: dial %s: %w", path, err)
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return nil, fmt.Errorf("control: dial %s: %w (last: %v)", path, ctx.Err(), err)
		}
	}
}

// NewClient speaks the protocol over an established stream (a dialled or
// accepted connection, a net.Pipe end). The Client owns conn.
func NewClient(conn io.ReadWriteCloser) *Client {
	c := &Client{
		rwc:     conn,
		fw:      FrameWriter{w: conn},
		pending: map[uint64]*call{},
		done:    make(chan struct{}),
	}
	c.subs.init()
	go c.read()
	return c
}

// Close closes the connection; pending calls fail with ErrClosed.
func (c *Client) Close() error {
	c.shutdown(ErrClosed)
	return nil
}

// Done is closed when the connection has ended; Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) shutdown(err error) {
	c.closeOnce.Do(func() {
		_ = c.rwc.Close()
		c.mu.Lock()
		c.err = err
		pending := c.pending
		c.pending = map[uint64]*call{}
		c.mu.Unlock()
		for _, pc := range pending {
			close(pc.ch)
		}
		c.subs.closeAll()
		close(c.done)
	})
}

func (c *Client) read() {
	fr := NewFrameReader(c.rwc, MaxFrameSize)
	for {
		line, err := fr.Next()
		if errors.Is(err, ErrFrameTooLarge) {
			continue
		}
		if err != nil {
			if IsClosed(err) {
				err = ErrClosed
			}
			c.shutdown(err)
			return
		}
		var f Frame
		if json.Unmarshal(line, &f) != nil {
			// E.g. the tail of a frame the guest wrote to a previous host.
			continue
		}
		if f.Event != "" {
			if ev, ok := parseEvent(f); ok {
				c.subs.dispatch(ev)
			}
			continue
		}
		c.mu.Lock()
		pc, ok := c.pending[f.ID]
		delete(c.pending, f.ID)
		c.mu.Unlock()
		if !ok {
			continue // a canceled call, or an error about a bad frame (id 0)
		}
		if pc.onReply != nil {
			pc.onReply(f)
		}
		pc.ch <- f
	}
}

// Call sends a request and decodes its result into result (unless nil).
// An error reply is returned as *Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return c.call(ctx, method, params, result, nil)
}

func (c *Client) call(ctx context.Context, method string, params, result any, onReply func(Frame)) error {
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return fmt.Errorf("control: %s: encode params: %w", method, err)
		}
		raw = b
	}
	pc := &call{ch: make(chan Frame, 1), onReply: onReply}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("control: %s: %w", method, err)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = pc
	c.mu.Unlock()

	if err := c.fw.WriteFrame(&Frame{ID: id, Method: method, Params: raw}); err != nil {
		c.forget(id)
		c.shutdown(err)
		return fmt.Errorf("control: %s: %w", method, err)
	}
	var f Frame
	var ok bool
	select {
	case f, ok = <-pc.ch:
	case <-ctx.Done():
		if c.forget(id) {
			go c.cancelRemote(id)
			return fmt.Errorf("control: %s: %w", method, ctx.Err())
		}
		f, ok = <-pc.ch // the reply is being delivered: take it
	}
	if !ok {
		return fmt.Errorf("control: %s: %w", method, c.Err())
	}
	if f.Error != nil {
		return f.Error
	}
	if result != nil && len(f.Result) > 0 {
		if err := json.Unmarshal(f.Result, result); err != nil {
			return fmt.Errorf("control: %s: decode result: %w", method, err)
		}
	}
	return nil
}

// forget drops a pending call; false if its reply already came.
func (c *Client) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

func (c *Client) cancelRemote(id uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Call(ctx, MethodCancel, CancelParams{ID: id}, nil)
}

// Ping asks the guest for its protocol version, uptime and boot ID.
func (c *Client) Ping(ctx context.Context) (PingResult, error) {
	var r PingResult
	err := c.Call(ctx, MethodPing, struct{}{}, &r)
	return r, err
}

// WaitReady pings every interval (bounded by ctx) until the guest answers:
// a request written before the guest opened its port may never be read.
func (c *Client) WaitReady(ctx context.Context, interval time.Duration) (PingResult, error) {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, interval)
		r, err := c.Ping(pctx)
		cancel()
		if err == nil {
			return r, nil
		}
		if ctx.Err() != nil || c.Err() != nil {
			return PingResult{}, err
		}
	}
}

// SetIdentity pushes a (new) identity and a random seed (give at least 32
// bytes from crypto/rand; every clone a different one). The result says
// what the guest applied; result.Err() reports steps that failed.
func (c *Client) SetIdentity(ctx context.Context, id identity.Identity, seed []byte) (SetIdentityResult, error) {
	var r SetIdentityResult
	err := c.Call(ctx, MethodSetIdentity, SetIdentityParams{Identity: id, Seed: seed}, &r)
	return r, err
}

// PrepareSnapshot returns once the guest has flushed its filesystems
// (and, with dropNetwork, dropped its network: RestoreNetwork gives it
// back).
func (c *Client) PrepareSnapshot(ctx context.Context, dropNetwork bool) (PrepareSnapshotResult, error) {
	var r PrepareSnapshotResult
	err := c.Call(ctx, MethodPrepareSnapshot, PrepareSnapshotParams{DropNetwork: dropNetwork}, &r)
	return r, err
}

// MountVolumes mounts the identity's volumes (once the VM's network is
// open: their server is on the host side).
func (c *Client) MountVolumes(ctx context.Context) (MountVolumesResult, error) {
	var r MountVolumesResult
	err := c.Call(ctx, MethodMountVolumes, struct{}{}, &r)
	return r, err
}

// RestoreNetwork gives a VM whose network PrepareSnapshot dropped its
// network back.
func (c *Client) RestoreNetwork(ctx context.Context) (RestoreNetworkResult, error) {
	var r RestoreNetworkResult
	err := c.Call(ctx, MethodRestoreNetwork, struct{}{}, &r)
	return r, err
}

// Start starts a process. Its output and exit events are delivered on
// the returned Process's Events channel from the very first one. Read them
// or Close the Process: while they are not read they queue only up to a
// bound, beyond which output is dropped (Event.Dropped says how much).
func (c *Client) Start(ctx context.Context, p StartParams) (*Process, error) {
	var proc *Process
	err := c.call(ctx, MethodStart, p, nil, func(f Frame) {
		// On the reader, before the next frame: no event can be missed.
		var r StartResult
		if f.Error == nil && json.Unmarshal(f.Result, &r) == nil && r.PID > 0 {
			proc = &Process{PID: r.PID, c: c, sub: c.Subscribe(r.PID)}
		}
	})
	if err != nil {
		return nil, err
	}
	if proc == nil {
		return nil, fmt.Errorf("control: start: bad reply")
	}
	return proc, nil
}

// Signal sends sig to a process.
func (c *Client) Signal(ctx context.Context, pid, sig int) error {
	return c.Call(ctx, MethodSignal, SignalParams{PID: pid, Signal: sig}, nil)
}

// SignalGroup sends sig to a process's process group.
func (c *Client) SignalGroup(ctx context.Context, pid, sig int) error {
	return c.Call(ctx, MethodSignal, SignalParams{PID: pid, Signal: sig, Group: true}, nil)
}

// Wait blocks until the process has exited; it returns at once if it
// already has. All events of the process read before its exit precede
// the reply.
func (c *Client) Wait(ctx context.Context, pid int) (ExitStatus, error) {
	var r ExitStatus
	err := c.Call(ctx, MethodWait, PIDParams{PID: pid}, &r)
	return r, err
}

// WriteStdin writes to a process's stdin (in order with other
// WriteStdin/CloseStdin calls of this Client).
func (c *Client) WriteStdin(ctx context.Context, pid int, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), stdinChunk)
		if err := c.Call(ctx, MethodWriteStdin, WriteStdinParams{PID: pid, Data: data[:n]}, nil); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// CloseStdin closes a process's stdin (sends ^D to a terminal).
func (c *Client) CloseStdin(ctx context.Context, pid int) error {
	return c.Call(ctx, MethodCloseStdin, PIDParams{PID: pid}, nil)
}

// Resize sets a terminal process's window size.
func (c *Client) Resize(ctx context.Context, pid int, cols, rows uint16) error {
	return c.Call(ctx, MethodResize, ResizeParams{PID: pid, Cols: cols, Rows: rows}, nil)
}

// Process is a process started through a Client.
type Process struct {
	PID int
	c   *Client
	sub *Subscription
}

// Events delivers the process's output and exit events, in order, and
// is closed after the exit event (or when the connection ends).
func (p *Process) Events() <-chan Event { return p.sub.C }

// Wait waits for the exit (see Client.Wait).
func (p *Process) Wait(ctx context.Context) (ExitStatus, error) { return p.c.Wait(ctx, p.PID) }

// Close stops the event subscription; the process keeps running.
func (p *Process) Close() { p.sub.Close() }

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

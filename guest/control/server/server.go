package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/sandlot-dev/sandlot/guest/control"
)

// ServerConn serves the protocol on one established stream.
type ServerConn struct {
	h   *Handler
	rwc io.ReadWriteCloser
	fw  *control.FrameWriter

	closeOnce sync.Once

	mu       sync.Mutex
	inflight map[uint64]context.CancelFunc
}

// NewServerConn serves h on conn, whichever side established it (the
// guest's open virtio-serial port, an accepted or dialled socket, a
// net.Pipe end). Call Serve.
func NewServerConn(conn io.ReadWriteCloser, h *Handler) *ServerConn {
	return &ServerConn{h: h, rwc: conn, fw: control.NewFrameWriter(conn), inflight: map[uint64]context.CancelFunc{}}
}

// Serve attaches the connection as the event sink (delivering events
// queued while no host was attached), then handles requests until the
// stream ends, ctx is done or another connection takes over. It closes
// the stream and returns nil on EOF or takeover.
func (sc *ServerConn) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, sc.closeConn)
	defer stop()
	defer func() {
		sc.closeConn() // first: unblocks an event write holding the queue
		sc.h.ev.detach(sc)
	}()

	sc.h.ev.attach(sc)
	fr := control.NewFrameReader(sc.rwc, sc.h.opts.MaxFrameSize)
	for {
		line, err := fr.Next()
		switch {
		case errors.Is(err, control.ErrFrameTooLarge):
			sc.replyErr(0, control.Errorf(control.CodeFrameTooLarge, "frame over %d bytes", sc.h.opts.MaxFrameSize))
			continue
		case err != nil:
			if ctx.Err() != nil || control.IsClosed(err) {
				return nil
			}
			return fmt.Errorf("control: read: %w", err)
		}
		sc.dispatch(ctx, line)
	}
}

// Close ends the connection; Serve returns.
func (sc *ServerConn) Close() error {
	sc.closeConn()
	return nil
}

func (sc *ServerConn) closeConn() {
	sc.closeOnce.Do(func() { _ = sc.rwc.Close() })
}

func (sc *ServerConn) dispatch(ctx context.Context, line []byte) {
	f, e := control.DecodeRequest(line)
	if e != nil {
		sc.replyErr(f.ID, e)
		return
	}
	switch f.Method {
	case control.MethodCancel:
		sc.cancel(f)
		return
	case control.MethodWriteStdin, control.MethodCloseStdin:
		// In order, on the reader: the process's stdin queue keeps the
		// order of the writes while they complete asynchronously.
		sc.h.stdinRequest(f, func(err error) { sc.reply(f.ID, struct{}{}, err) })
		return
	}
	fn, ok := methods[f.Method]
	if !ok {
		sc.replyErr(f.ID, control.Errorf(control.CodeUnknownMethod, "%q", f.Method))
		return
	}
	rctx, done, e := sc.begin(ctx, f.ID)
	if e != nil {
		sc.replyErr(f.ID, e)
		return
	}
	params := append(json.RawMessage(nil), f.Params...) // line is reused by the reader
	go func() {
		defer done()
		res, err := fn(sc.h, rctx, params)
		if err == nil && rctx.Err() != nil && ctx.Err() == nil {
			err = control.Errorf(control.CodeCanceled, "request %d canceled", f.ID)
		}
		sc.reply(f.ID, res, err)
	}()
}

// begin registers an in-flight request so cancel can reach it.
func (sc *ServerConn) begin(ctx context.Context, id uint64) (context.Context, func(), *control.Error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, dup := sc.inflight[id]; dup {
		return nil, nil, control.Errorf(control.CodeBadFrame, "request id %d already in flight", id)
	}
	if len(sc.inflight) >= maxInFlight {
		return nil, nil, control.Errorf(control.CodeBusy, "%d requests in flight", maxInFlight)
	}
	rctx, cancel := context.WithCancel(ctx)
	sc.inflight[id] = cancel
	return rctx, func() {
		cancel()
		sc.mu.Lock()
		delete(sc.inflight, id)
		sc.mu.Unlock()
	}, nil
}

func (sc *ServerConn) cancel(f control.Frame) {
	var p control.CancelParams
	if e := control.DecodeParams(f.Params, &p); e != nil {
		sc.replyErr(f.ID, e)
		return
	}
	sc.mu.Lock()
	cancel, ok := sc.inflight[p.ID]
	sc.mu.Unlock()
	if ok {
		cancel()
	}
	sc.reply(f.ID, struct {
		Canceled bool `json:"canceled"`
	}{ok}, nil)
}

func (sc *ServerConn) reply(id uint64, result any, err error) {
	if err != nil {
		sc.replyErr(id, control.AsError(err))
		return
	}
	b, merr := json.Marshal(result)
	if merr != nil {
		sc.replyErr(id, control.Errorf(control.CodeFailed, "encode result: %v", merr))
		return
	}
	_ = sc.fw.WriteFrame(&control.Frame{ID: id, Result: b})
}

func (sc *ServerConn) replyErr(id uint64, e *control.Error) {
	_ = sc.fw.WriteFrame(&control.Frame{ID: id, Error: e})
}

// Serve serves h at path until ctx is done:
//
//   - a character device (a virtio-serial port, in a VM) is opened and
//     served; when the host disconnects it is reopened and served again;
//   - any other path is a unix socket the guest listens on (replacing a
//     stale socket file); each accepted connection takes over from the
//     previous one.
//
// It returns ctx.Err() once ctx is done, or an error if it cannot listen.
func Serve(ctx context.Context, path string, h *Handler) error {
	fi, err := os.Stat(path)
	if err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return serveDevice(ctx, path, h)
	}
	return serveSocket(ctx, path, h)
}

func serveSocket(ctx context.Context, path string, h *Handler) error {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("control: %s exists and is neither a char device nor a socket", path)
		}
		_ = os.Remove(path)
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("control: listen: %w", err)
	}
	defer os.Remove(path)
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("control: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := NewServerConn(conn, h).Serve(ctx); err != nil {
				h.log.Warn("control: connection ended", "err", err)
			}
		}()
	}
}

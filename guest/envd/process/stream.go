package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
)

// defaultKeepalive is the SDK's own interval, used when it sends none.
const defaultKeepalive = 50 * time.Second

// Start starts a process and streams its events: start, data, end. The
// process outlives the stream: a client that disconnects (a background
// command) can Connect again later.
func (s *Service) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	cmd, err := s.command(ctx, req.Msg)
	if err != nil {
		return err
	}
	var p *proc
	if req.Msg.GetPty() != nil {
		p, err = startPTY(cmd, req.Msg.GetPty().GetSize())
	} else {
		p, err = startPipes(cmd, req.Msg.GetStdin())
	}
	if err != nil {
		return startError(req.Msg.GetProcess().GetCmd(), err)
	}
	p.config = proto.CloneOf(req.Msg.GetProcess())
	if req.Msg.Tag != nil {
		p.tag = proto.String(req.Msg.GetTag())
	}
	sub := p.subscribe() // before the output is read, so none is missed
	// The executable, not its arguments: they may carry what a user
	// typed, and the log is readable by whoever may read the pod's.
	slog.Info("process started", "pid", p.pid, "cmd", cmd.Path, "tag", p.info().GetTag())
	regErr := s.register(p)
	go p.run(func() { s.remove(p) })
	if regErr != nil {
		_ = p.signal(unix.SIGKILL)
		p.unsubscribe(sub)
		return regErr
	}
	return follow(ctx, p, sub, keepalive(req.Header()), func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	})
}

// Connect attaches to a started process: start, then its further events.
func (s *Service) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	return follow(ctx, p, p.subscribe(), keepalive(req.Header()), func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	})
}

// follow sends sub's events until the end event, with keep-alives in the
// quiet periods so proxies and the SDK don't time the stream out.
func follow(ctx context.Context, p *proc, sub *subscriber, interval time.Duration, send func(*processpb.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err() // the client left; the process carries on
		case <-tick.C:
			if err := send(keepaliveEvent()); err != nil {
				return fmt.Errorf("send keepalive of process %d: %w", p.pid, err)
			}
		case <-sub.wake:
			evs, dropped := sub.take()
			for _, ev := range evs {
				if err := send(ev); err != nil {
					return fmt.Errorf("send event of process %d: %w", p.pid, err)
				}
				if ev.GetEnd() != nil {
					return nil
				}
			}
			if dropped != nil {
				return dropped
			}
		}
	}
}

// keepalive reads the SDK's `Keepalive-Ping-Interval: <seconds>` header.
func keepalive(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return defaultKeepalive
	}
	return time.Duration(min(n, 24*3600)) * time.Second
}

// startError classifies why exec failed: a missing or unusable program or
// directory is the caller's, anything else ours.
func startError(cmd string, err error) error {
	err = fmt.Errorf("start %s: %w", cmd, err)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, fs.ErrPermission):
		return connect.NewError(connect.CodePermissionDenied, err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

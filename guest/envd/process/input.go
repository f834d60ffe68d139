package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
)

// SendInput writes to the process's stdin or PTY.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.write(ctx, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

// StreamInput is SendInput as a client stream: a start event naming the
// process, then data events; keep-alives are ignored.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *processpb.StreamInputRequest_Start:
			var err error
			if p, err = s.running(ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *processpb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input stream must start with a start event naming the process"))
			}
			if err := p.write(ctx, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, fmt.Errorf("receive input: %w", err)
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

// CloseStdin closes the stdin pipe, so the process reads EOF.
func (s *Service) CloseStdin(_ context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.tty != nil:
		return nil, precondition("process %d runs on a PTY, which has no stdin to close; send Ctrl-D (0x04) as PTY input instead", p.pid)
	case !p.hadStdin:
		return nil, precondition("process %d was started without stdin (start it with stdin: true)", p.pid)
	}
	p.closeStdinLocked() // closing twice is not an error
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

// SendSignal signals the process's group.
func (s *Service) SendSignal(_ context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	var sig unix.Signal
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGKILL:
		sig = unix.SIGKILL
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = unix.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v", req.Msg.GetSignal()))
	}
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.signal(sig); err != nil {
		if errors.Is(err, errExited) {
			return nil, notFound(req.Msg.GetProcess())
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("signal process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// Update resizes the process's PTY.
func (s *Service) Update(_ context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetPty() == nil {
		return connect.NewResponse(&processpb.UpdateResponse{}), nil // nothing to change
	}
	if p.tty == nil {
		return nil, precondition("process %d was not started with a PTY", p.pid)
	}
	if err := setSize(p.tty, req.Msg.GetPty().GetSize()); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("process %d: %w", p.pid, err))
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}

// write sends input to the process. Stdin input to a PTY process goes to
// the terminal, its only input. A write blocks while the process does not
// read, but no longer than the request lives.
func (p *proc) write(ctx context.Context, in *processpb.ProcessInput) error {
	f, err := p.inputFile(in)
	if err != nil {
		return err
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	_ = f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, err := f.Write(append(in.GetStdin(), in.GetPty()...)); err != nil { // only one is set
		return writeError(p.pid, err)
	}
	return nil
}

func (p *proc) inputFile(in *processpb.ProcessInput) (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch in.GetInput().(type) {
	case *processpb.ProcessInput_Pty:
		if p.tty == nil {
			return nil, precondition("process %d was not started with a PTY", p.pid)
		}
		return p.tty, nil
	case *processpb.ProcessInput_Stdin:
		switch {
		case p.tty != nil:
			return p.tty, nil
		case p.stdin != nil:
			return p.stdin, nil
		case p.hadStdin:
			return nil, precondition("stdin of process %d is closed", p.pid)
		default:
			return nil, precondition("process %d was started without stdin (start it with stdin: true)", p.pid)
		}
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input needs stdin or pty data"))
	}
}

func writeError(pid uint32, err error) error {
	err = fmt.Errorf("write input to process %d: %w", pid, err)
	switch {
	case errors.Is(err, os.ErrClosed), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EIO):
		return connect.NewError(connect.CodeFailedPrecondition, err) // closed, or the process stopped reading
	case errors.Is(err, os.ErrDeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

func precondition(format string, args ...any) error {
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(format, args...))
}

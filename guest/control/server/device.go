package server

import (
	"context"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"
)

// devicePoll is how often a disconnected port is checked for a host when
// no SIGIO arrives (virtio_console sends SIGIO to an O_ASYNC owner when
// the host side connects; the poll is the fallback).
const devicePoll = 250 * time.Millisecond

// serveDevice serves a virtio-serial port. Reads return EOF while no host
// is connected (and writes would block), so each time the host goes away
// the port is closed — which also unblocks a blocked event write — and
// reopened, and the guest waits until the host is back.
func serveDevice(ctx context.Context, path string, h *Handler) error {
	sigio := make(chan os.Signal, 1)
	signal.Notify(sigio, unix.SIGIO)
	defer signal.Stop(sigio)

	for ctx.Err() == nil {
		f, err := openPort(path)
		if err != nil {
			h.log.Warn("control: open port", "path", path, "err", err)
			if !sleepCtx(ctx, devicePoll) {
				break
			}
			continue
		}
		if waitHost(ctx, f, sigio) {
			if err := NewServerConn(f, h).Serve(ctx); err != nil {
				h.log.Warn("control: port", "path", path, "err", err)
				// Do not spin on a port that keeps failing.
				sleepCtx(ctx, devicePoll)
			}
		}
		_ = f.Close()
	}
	return ctx.Err()
}

// openPort opens the port (non-blocking, through Go's poller, so Close
// interrupts blocked reads and writes) and asks for SIGIO on changes.
func openPort(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return f, nil
	}
	_ = rc.Control(func(fd uintptr) {
		if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err == nil {
			_, _ = unix.FcntlInt(fd, unix.F_SETFL, fl|unix.O_ASYNC)
		}
		_, _ = unix.FcntlInt(fd, unix.F_SETOWN, os.Getpid())
	})
	return f, nil
}

// waitHost returns true once the port has a host (poll reports no
// POLLHUP), false when ctx is done.
func waitHost(ctx context.Context, f *os.File, sigio <-chan os.Signal) bool {
	for {
		if hostConnected(f) {
			return true
		}
		t := time.NewTimer(devicePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-sigio:
		case <-t.C:
		}
		t.Stop()
	}
}

func hostConnected(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return true
	}
	connected := true
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		if err == nil && n > 0 && fds[0].Revents&unix.POLLHUP != 0 {
			connected = false
		}
	})
	return connected
}

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

// Package guestlog is the guest agent's logger in a VM: text on stderr
// (the VM's console log on the node) and a JSON line per record into the
// guest's log FIFO (control.LogFIFO) while the sandbox's container reads
// it, so the agent's own log is in `kubectl logs` and the E2B logs routes
// beside the start command's output, each line with its level.
package guestlog

import (
	"io"
	"log/slog"

	"golang.org/x/sys/unix"
)

// New is a logger writing text to console and JSON lines to the FIFO at
// fifo, both at Info and above.
func New(console io.Writer, fifo string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	return slog.New(slog.NewMultiHandler(slog.NewTextHandler(console, opts),
		slog.NewJSONHandler(&FIFOWriter{Path: fifo}, opts)))
}

// FIFOWriter writes each Write to the FIFO at Path as one write: a line
// shorter than PIPE_BUF is never interleaved with another writer's. It
// never blocks and never fails the logger: with no FIFO, no reader, or
// a full FIFO the line is the console's only.
type FIFOWriter struct {
	Path string
}

func (w *FIFOWriter) Write(p []byte) (int, error) {
	fd, err := unix.Open(w.Path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return len(p), nil // ENXIO: no reader; ENOENT: no FIFO yet
	}
	defer unix.Close(fd)
	// Only a FIFO: a file planted at the path would be appended to.
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
		_, _ = unix.Write(fd, p)
	}
	return len(p), nil
}

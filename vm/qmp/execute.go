package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

type request struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        uint64 `json:"id"`
}

// Execute runs one QMP command. args is marshalled as the "arguments" object
// (nil for none); the "return" value is unmarshalled into result unless it is
// nil. A QMP error reply is returned as a wrapped *Error.
//
// If ctx ends first Execute returns ctx's error, but the command may still
// take effect in QEMU; its late reply is discarded.
func (m *Monitor) Execute(ctx context.Context, command string, args, result any) error {
	return m.execute(ctx, command, args, nil, result)
}

// execute sends the command with oob as ancillary data (SCM_RIGHTS) in the
// same write, so QEMU receives the fds together with the command.
func (m *Monitor) execute(ctx context.Context, command string, args any, oob []byte, result any) error {
	id := m.nextID.Add(1)
	line, err := json.Marshal(request{Execute: command, Arguments: args, ID: id})
	if err != nil {
		return fmt.Errorf("%s: encode arguments: %w", command, err)
	}
	ch, err := m.register(id)
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	if err := m.write(ctx, append(line, '\n'), oob); err != nil {
		m.unregister(id)
		return fmt.Errorf("%s: %w", command, err)
	}
	r, err := m.await(ctx, id, ch)
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	if r.err != nil {
		return fmt.Errorf("%s: %w", command, r.err)
	}
	if result != nil {
		if err := json.Unmarshal(r.ret, result); err != nil {
			return fmt.Errorf("%s: decode return value: %w", command, err)
		}
	}
	return nil
}

// register must happen before the write: the reply can arrive immediately.
func (m *Monitor) register(id uint64) (chan reply, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, m.err
	}
	ch := make(chan reply, 1)
	m.pending[id] = ch
	return ch, nil
}

func (m *Monitor) unregister(id uint64) {
	m.mu.Lock()
	delete(m.pending, id)
	m.mu.Unlock()
}

func (m *Monitor) await(ctx context.Context, id uint64, ch chan reply) (reply, error) {
	select {
	case r := <-ch:
		return r, nil
	case <-m.done:
		select { // a reply read before the close still counts (e.g. quit)
		case r := <-ch:
			return r, nil
		default:
		}
		return reply{}, m.err
	case <-ctx.Done():
		m.unregister(id)
		return reply{}, context.Cause(ctx)
	}
}

// write sends one command line. A write that fails after sending part of the
// line leaves the stream unparseable for QEMU, so it closes the monitor.
func (m *Monitor) write(ctx context.Context, line, oob []byte) error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if err := m.Err(); err != nil {
		return err
	}
	// A stuck QEMU stops reading; the deadline lets ctx interrupt the write.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		m.conn.SetWriteDeadline(time.Unix(1, 0))
		close(fired)
	})
	n, err := m.send(line, oob)
	if !stop() {
		<-fired
		m.conn.SetWriteDeadline(time.Time{})
	}
	if err == nil {
		return nil
	}
	if n == 0 && ctx.Err() != nil {
		return context.Cause(ctx) // nothing sent: the stream is still in sync
	}
	m.abort(fmt.Errorf("write: %w", err))
	<-m.done
	return m.err
}

func (m *Monitor) send(line, oob []byte) (int, error) {
	var n int
	if len(oob) > 0 {
		k, _, err := m.conn.WriteMsgUnix(line, oob, nil)
		if err != nil {
			return k, err
		}
		n = k // a stream socket may take part of it; the fds went with that part
	}
	if n == len(line) {
		return n, nil
	}
	k, err := m.conn.Write(line[n:])
	n += k
	if err == nil && n < len(line) {
		err = io.ErrShortWrite
	}
	return n, err
}

// SendFD hands f to QEMU under name with the getfd command; the descriptor
// travels as SCM_RIGHTS in the same write. QEMU keeps its own copy, so the
// caller may close f afterwards (for a pipe's write end it must, or the
// reader never sees EOF). Use the name as "fd:NAME" in migrate URIs; a
// second SendFD with the same name replaces the first.
func (m *Monitor) SendFD(ctx context.Context, name string, f *os.File) error {
	if name == "" || f == nil {
		return errors.New("getfd: need a name and a file")
	}
	rc, err := f.SyscallConn() // not f.Fd(): that would switch f to blocking mode
	if err != nil {
		return fmt.Errorf("getfd %s: %w", name, err)
	}
	// QEMU keeps received fds until the next getfd consumes them; one getfd at
	// a time guarantees each name gets the fd that was sent with it.
	m.fdMu.Lock()
	defer m.fdMu.Unlock()
	var execErr error
	ctrlErr := rc.Control(func(fd uintptr) {
		args := map[string]string{"fdname": name}
		execErr = m.execute(ctx, "getfd", args, unix.UnixRights(int(fd)), nil)
	})
	if ctrlErr != nil {
		return fmt.Errorf("getfd %s: %w", name, ctrlErr)
	}
	return execErr
}

// CloseFD drops a descriptor passed with SendFD that QEMU has not consumed,
// e.g. after a failed migrate.
func (m *Monitor) CloseFD(ctx context.Context, name string) error {
	return m.Execute(ctx, "closefd", map[string]string{"fdname": name}, nil)
}

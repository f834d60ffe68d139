package vm

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// ConsoleLogMax caps the serial console log; at the cap the log moves to
// <log>.1 (replacing the one before) and starts again, so a guest flooding
// its console uses at most twice this on the node's disk.
const ConsoleLogMax = 1 << 20

// startConsole opens the pipe QEMU writes the serial console to and
// copies it into the capped log until QEMU closes it. It returns the
// pipe's write end, for QEMU's stdout.
func (v *VM) startConsole() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	log := &cappedLog{path: v.spec.Console, max: ConsoleLogMax}
	go func() {
		defer r.Close()
		defer log.close()
		_ = log.copyFrom(r)
	}()
	return w, nil
}

// cappedLog is a file that rotates to path.1 when it reaches max bytes.
type cappedLog struct {
	path string
	max  int64
	f    *os.File
	n    int64
}

// copyFrom writes what r gives until r ends. A failing log never blocks
// the reader: the console is drained even if nothing can be kept.
func (c *cappedLog) copyFrom(r io.Reader) error {
	buf := make([]byte, 32<<10)
	var keep error
	for {
		n, err := r.Read(buf)
		if n > 0 && keep == nil {
			keep = c.write(buf[:n])
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return keep
			}
			return err
		}
	}
}

func (c *cappedLog) write(b []byte) error {
	for len(b) > 0 {
		if c.f == nil || c.n >= c.max {
			if err := c.rotate(); err != nil {
				return err
			}
		}
		part := b
		if room := c.max - c.n; int64(len(part)) > room {
			part = part[:room]
		}
		n, err := c.f.Write(part)
		c.n += int64(n)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// rotate moves the log to path.1 and starts a new one. The log is in a
// directory QEMU can write: the names are renamed and created beneath it
// (renameat, a new file with O_EXCL), so a link QEMU put in the log's
// place is moved or removed, never written through.
func (c *cappedLog) rotate() error {
	d, err := OpenDir(filepath.Dir(c.path))
	if err != nil {
		return err
	}
	defer d.Close()
	name := filepath.Base(c.path)
	if c.f != nil {
		c.f.Close()
		c.f = nil
		if err := d.Rename(name, name+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	f, err := d.Replace(name, 0o600)
	if err != nil {
		return err
	}
	c.f, c.n = f, 0
	return nil
}

func (c *cappedLog) close() {
	if c.f != nil {
		c.f.Close()
	}
}

// consoleTail is the end of the console log (with the rotated part before
// it when the current one is short), for errors.
func consoleTail(path string) []byte { return logTail(path, 1500) }

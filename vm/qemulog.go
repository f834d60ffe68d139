package vm

import (
	"path/filepath"
	"time"
)

// QEMULogMax caps qemu.log, QEMU's stderr in the VM's run directory: on
// /run, a tmpfs, so node RAM. A guest can make QEMU print without end
// (guest errors QEMU logs), so at the cap the log moves to qemu.log.1
// (replacing the one before) and starts again: at most twice this is
// kept, and always the newest words, those that say why QEMU died.
const QEMULogMax = 512 << 10

// qemuLogTail is how much of QEMU's log an error quotes.
const qemuLogTail = 2048

// qemuStderrDrain bounds how long QEMU's exit waits, once QEMU is gone,
// for the rest of its stderr to be copied into the log: a process that
// inherited the pipe could otherwise hold the exit up for good.
const qemuStderrDrain = 2 * time.Second

// qemuLogPath is QEMU's log in run directory dir.
func qemuLogPath(dir string) string { return filepath.Join(dir, "qemu.log") }

// logWriter is a cappedLog as an io.Writer, for QEMU's stderr: exec then
// copies the stderr pipe into it, and Cmd.Wait returns only once it has
// all of it (or WaitDelay passed), so the log is complete when QEMU's
// exit is reported.
type logWriter struct {
	log *cappedLog
	err error // the first failure; later output is drained and dropped
}

// openLogWriter creates (or empties) the log at path, capped at max.
func openLogWriter(path string, max int64) (*logWriter, error) {
	l := &cappedLog{path: path, max: max}
	if err := l.rotate(); err != nil {
		return nil, err // os.OpenFile's error names the path
	}
	return &logWriter{log: l}, nil
}

// Write keeps what the log takes and never fails: an error would end
// exec's copy, and QEMU would then block on (or die of) a full pipe.
func (w *logWriter) Write(p []byte) (int, error) {
	if w.err == nil {
		w.err = w.log.write(p)
	}
	return len(p), nil
}

// Close closes the log once nothing more is written to it.
func (w *logWriter) Close() error {
	w.log.close()
	return w.err
}

// logTail is the last n bytes of a capped log, with the end of the
// rotated part before it when the current one is shorter. The logs are
// in directories QEMU can write: each is read beneath its directory, only
// if it is a regular file with one link (what QEMU put in its place is
// left out, never followed), and only its last n bytes.
func logTail(path string, n int) []byte {
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return nil
	}
	defer d.Close()
	name := filepath.Base(path)
	b := fileTail(d, name, n)
	if len(b) < n {
		b = append(fileTail(d, name+".1", n-len(b)), b...)
	}
	return b
}

// fileTail is the last n bytes of name in d, nil if it cannot be read.
func fileTail(d *Dir, name string, n int) []byte {
	f, err := d.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(0, fi.Size()-int64(n))
	b := make([]byte, fi.Size()-off)
	k, _ := f.ReadAt(b, off)
	return b[:k]
}

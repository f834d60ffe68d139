package vm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestQEMULogCap: writes past the cap keep each of the two files within
// it, and the tail (read across the rotation) is the newest output.
func TestQEMULogCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qemu.log")
	w, err := openLogWriter(path, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var sent []byte
	for i := range 700 { // uneven writes, 10 caps in all
		line := []byte(strings.Repeat("x", i%23) + "\n")
		if n, err := w.Write(line); n != len(line) || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
		sent = append(sent, line...)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cur, _ := os.ReadFile(path)
	prev, _ := os.ReadFile(path + ".1")
	if len(cur) > 1000 || len(prev) != 1000 || len(cur)+len(prev) != 1000+len(sent)%1000 {
		t.Fatalf("log sizes: current %d, rotated %d (of %d written)", len(cur), len(prev), len(sent))
	}
	if got, want := logTail(path, 1000), sent[len(sent)-1000:]; !bytes.Equal(got, want) {
		t.Fatalf("tail across the rotation: %q", got)
	}
	if _, err := os.Stat(path + ".2"); !os.IsNotExist(err) {
		t.Fatalf("a third file: %v", err)
	}
}

// TestQEMUStderrCapped runs a process as launch runs QEMU (stderr into
// the capped log, through exec's pipe): a flood of several caps leaves
// the log within them, Wait returns with the copy done, and the error
// text quotes the process's last words.
func TestQEMUStderrCapped(t *testing.T) {
	dir := t.TempDir()
	w, err := openLogWriter(qemuLogPath(dir), QEMULogMax)
	if err != nil {
		t.Fatal(err)
	}
	const last = "qemu-system-x86_64: guest error: the end"
	cmd := exec.Command("sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x >&2; echo '"+last+"' >&2; exit 1")
	cmd.Stderr, cmd.WaitDelay = w, qemuStderrDrain
	if err := cmd.Run(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("run: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{qemuLogPath(dir), qemuLogPath(dir) + ".1"} {
		if fi, err := os.Stat(p); err != nil || fi.Size() > QEMULogMax {
			t.Fatalf("%s: %v, size over %d", p, err, QEMULogMax)
		}
	}
	v := &VM{cfg: Config{RunDir: dir}}
	msg := v.qemuLog()
	if !strings.HasPrefix(msg, ": qemu says: ") || !strings.HasSuffix(msg, last+"\n") ||
		len(msg) != len(": qemu says: ")+qemuLogTail {
		t.Fatalf("qemuLog = %d bytes ending %q", len(msg), msg[max(0, len(msg)-60):])
	}
}

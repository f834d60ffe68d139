package guestlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLinesReachTheFIFO: with a reader, each record is a JSON line with
// its level in the FIFO and a text line on the console.
func TestLinesReachTheFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := unix.Mkfifo(path, 0o622); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(path, os.O_RDWR, 0) // as the guest agent's reader opens it
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var console bytes.Buffer
	log := New(&console, path)
	log.Info("process started", "pid", 42)
	log.Warn("setIdentity incomplete")
	log.Debug("not at info")
	lines := bufio.NewScanner(r)
	for _, want := range []struct{ level, msg string }{{"INFO", "process started"}, {"WARN", "setIdentity incomplete"}} {
		if err := r.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() {
			t.Fatalf("no line for %q: %v", want.msg, lines.Err())
		}
		var rec map[string]any
		if err := json.Unmarshal(lines.Bytes(), &rec); err != nil || rec["level"] != want.level || rec["msg"] != want.msg {
			t.Fatalf("FIFO line %s (%v); want level %s msg %q", lines.Text(), err, want.level, want.msg)
		}
	}
	if !strings.Contains(console.String(), "msg=\"process started\" pid=42") || strings.Contains(console.String(), "not at info") {
		t.Fatalf("console: %s", console.String())
	}
}

// TestNeverBlocksNorFails: no FIFO, a FIFO without a reader, a full FIFO
// and a regular file planted at the path: the logger returns at once and
// the file is not written.
func TestNeverBlocksNorFails(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	if err := unix.Mkfifo(full, 0o622); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(full, os.O_RDWR, 0) // a reader that never reads
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	unread := filepath.Join(dir, "unread")
	if err := unix.Mkfifo(unread, 0o622); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(dir, "planted")
	if err := os.WriteFile(planted, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 1000)
	for _, path := range []string{filepath.Join(dir, "none"), unread, full, planted} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			log := New(&bytes.Buffer{}, path)
			for range 200 { // 200 KB: more than a FIFO holds
				log.Info(line)
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("logging to %s blocked", path)
		}
	}
	if b, _ := os.ReadFile(planted); len(b) != 0 {
		t.Fatalf("the planted file was written: %d bytes", len(b))
	}
}

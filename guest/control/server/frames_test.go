package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// malformedInput holds frames that are each wrong in their own way,
// ending with a good ping that must still be answered.
var malformedInput = strings.Join([]string{
	`not json`,
	`[1,2,3]`,
	`{}`,
	`{"method":"ping"}`,
	`{"id":5}`,
	`{"id":6,"method":"nope"}`,
	`{"id":7,"method":"wait","params":{"pid":"x"}}`,
	`{"id":8,"method":"ping","result":{}}`,
	`{"id":9,"method":"signal","params":{"pid":1,"signal":-3}}`,
	`{"id":10,"method":"ping","params":` + strings.Repeat(" ", 2000) + `{}}`,
	"\x00\xff\xfe",
	``,
	`{"id":11,"method":"ping"}`,
}, "\n") + "\n"

// Bad frames get error replies (id 0 when they have no usable id) and the
// server keeps serving.
func TestMalformedFrames(t *testing.T) {
	for name, connect := range map[string]func(t *testing.T, h *Handler) net.Conn{
		"pipe":   rawPipeConn,
		"socket": rawSocketConn,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHandler(t, Options{MaxFrameSize: 1024})
			conn := connect(t, h)
			go func() { _, _ = io.WriteString(conn, malformedInput) }()

			want := map[uint64]string{5: control.CodeBadFrame, 6: control.CodeUnknownMethod,
				7: control.CodeInvalidParams, 8: control.CodeBadFrame, 9: control.CodeNotFound, 11: ""}
			zeroWant := []string{control.CodeBadFrame, control.CodeBadFrame, control.CodeBadFrame,
				control.CodeBadFrame, control.CodeFrameTooLarge, control.CodeBadFrame}
			zero := readReplies(t, conn, want, len(zeroWant))
			if strings.Join(zero, ",") != strings.Join(zeroWant, ",") {
				t.Errorf("id-0 errors %v, want %v", zero, zeroWant)
			}
		})
	}
}

// rawPipeConn serves h on a net.Pipe and returns the host's end, for
// writing frames no Client would.
func rawPipeConn(t *testing.T, h *Handler) net.Conn {
	guestEnd, hostEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = NewServerConn(guestEnd, h).Serve(ctx) }()
	t.Cleanup(func() { hostEnd.Close(); cancel() })
	return hostEnd
}

// rawSocketConn serves h on a socket and dials it once Serve listens.
func rawSocketConn(t *testing.T, h *Handler) net.Conn {
	path := serveSocketT(t, h)
	var conn net.Conn
	poll.Eventually(t, 10*time.Second, "the control socket to accept", func() (err error) {
		conn, err = net.Dial("unix", path)
		return err
	})
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readReplies reads replies until every id in want has had its reply
// (an error with that code, or a result for "") and zeroCount id-0 errors
// came; it returns the codes of those, in order.
func readReplies(t *testing.T, conn net.Conn, want map[uint64]string, zeroCount int) (zero []string) {
	t.Helper()
	fr := control.NewFrameReader(conn, control.MaxFrameSize)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(want) > 0 || len(zero) < zeroCount {
		line, err := fr.Next()
		if err != nil {
			t.Fatalf("read: %v (still waiting for %v, zero %v)", err, want, zero)
		}
		var f control.Frame
		if err := json.Unmarshal(line, &f); err != nil {
			t.Fatalf("reply %q: %v", line, err)
		}
		if f.ID == 0 {
			if f.Error == nil {
				t.Fatalf("id 0 without error: %s", line)
			}
			zero = append(zero, f.Error.Code)
			continue
		}
		code, ok := want[f.ID]
		if !ok {
			t.Fatalf("unexpected reply %s", line)
		}
		delete(want, f.ID)
		switch {
		case code == "" && (f.Error != nil || f.Result == nil):
			t.Errorf("id %d: %s, want a result", f.ID, line)
		case code != "" && (f.Error == nil || f.Error.Code != code):
			t.Errorf("id %d: %s, want error %s", f.ID, line, code)
		}
	}
	return zero
}

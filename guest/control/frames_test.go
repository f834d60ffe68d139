package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Bad frames get error replies (id 0 when they have no usable id) and the
// server keeps serving.
func TestMalformedFrames(t *testing.T) {
	for name, connect := range map[string]func(t *testing.T, h *Handler) net.Conn{
		"pipe": func(t *testing.T, h *Handler) net.Conn {
			guestEnd, hostEnd := net.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			go func() { _ = NewServerConn(guestEnd, h).Serve(ctx) }()
			t.Cleanup(func() { hostEnd.Close(); cancel() })
			return hostEnd
		},
		"socket": func(t *testing.T, h *Handler) net.Conn {
			path := serveSocketT(t, h)
			var conn net.Conn
			var err error
			for range 500 {
				if conn, err = net.Dial("unix", path); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return conn
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHandler(t, Options{MaxFrameSize: 1024})
			conn := connect(t, h)
			input := strings.Join([]string{
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
			go func() { _, _ = io.WriteString(conn, input) }()

			want := map[uint64]string{5: CodeBadFrame, 6: CodeUnknownMethod, 7: CodeInvalidParams,
				8: CodeBadFrame, 9: CodeNotFound, 11: ""}
			zeroWant := []string{CodeBadFrame, CodeBadFrame, CodeBadFrame, CodeBadFrame, CodeFrameTooLarge, CodeBadFrame}
			var zero []string
			fr := newFrameReader(conn, MaxFrameSize)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			for len(want) > 0 || len(zero) < len(zeroWant) {
				line, err := fr.next()
				if err != nil {
					t.Fatalf("read: %v (still waiting for %v, zero %v)", err, want, zero)
				}
				var f Frame
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
			if strings.Join(zero, ",") != strings.Join(zeroWant, ",") {
				t.Errorf("id-0 errors %v, want %v", zero, zeroWant)
			}
		})
	}
}

func FuzzFrame(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"method":"ping"}`,
		`{"id":2,"method":"setIdentity","params":{"sandboxID":"x","seed":"AAAA","network":{"address":"10.0.0.1/24"}}}`,
		`{"id":3,"method":"start","params":{"args":["true"],"uid":0,"terminal":true}}`,
		`{"id":4,"method":"writeStdin","params":{"pid":1,"data":"aGk="}}`,
		`{"event":"output","params":{"pid":1,"stream":"stdout","data":"aGk=","dropped":3}}`,
		`{"event":"exit","params":{"pid":1,"status":7,"signal":9}}`,
		`{"id":5,"error":{"code":"x","message":"y"}}`,
		"{\"id\":18446744073709551615,\"method\":\"\\u0000\"}\n\n{\"id\":-1}",
		`{"id":1.5,"method":"ping","params":[]}`,
		"\xff\xfe\n{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 256
		fr := newFrameReader(bytes.NewReader(data), limit)
		for {
			line, err := fr.next()
			if errors.Is(err, errFrameTooLarge) {
				continue
			}
			if err != nil {
				break
			}
			if len(line) > limit {
				t.Fatalf("frame of %d bytes over the %d limit", len(line), limit)
			}
			req, e := DecodeRequest(line)
			if e != nil {
				if e.Code == "" || e.Error() == "" {
					t.Fatal("error without code")
				}
			} else if req.ID == 0 || req.Method == "" {
				t.Fatalf("accepted %q", line)
			}
			for _, v := range []any{&SetIdentityParams{}, &StartParams{}, &SignalParams{}, &PIDParams{},
				&WriteStdinParams{}, &ResizeParams{}, &CancelParams{}} {
				_ = decodeParams(req.Params, v)
			}
			var fm Frame
			if json.Unmarshal(line, &fm) == nil {
				if fm.Event != "" {
					parseEvent(fm)
				}
				if _, err := json.Marshal(&fm); err != nil {
					t.Fatalf("re-encode %q: %v", line, err)
				}
			}
		}
	})
}

func TestEUI64LinkLocal(t *testing.T) {
	for mac, want := range map[string]string{
		"52:54:00:12:34:56": "fe80::5054:ff:fe12:3456/64",
		"02:00:00:00:00:06": "fe80::ff:fe00:6/64",
	} {
		hw, err := net.ParseMAC(mac)
		if err != nil {
			t.Fatal(err)
		}
		if got := eui64LinkLocal(hw).String(); got != want {
			t.Errorf("%s: %s, want %s", mac, got, want)
		}
	}
}

package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzFrame feeds arbitrary bytes through what both ends run on every
// frame: the reader's bound, request decoding, params and events.
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
		fr := NewFrameReader(bytes.NewReader(data), limit)
		for {
			line, err := fr.Next()
			if errors.Is(err, ErrFrameTooLarge) {
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
				_ = DecodeParams(req.Params, v)
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

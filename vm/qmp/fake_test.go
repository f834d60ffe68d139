package qmp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A scripted QMP server on a unix socket, standing in for QEMU.

const fakeGreeting = `{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "fake"}, "capabilities": ["oob"]}}`

type fakeRequest struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

type fakeConn struct {
	t   *testing.T
	c   *net.UnixConn
	buf []byte
	fds []int // descriptors received with SCM_RIGHTS, in order
}

// shortTempDir keeps socket paths under the 108-byte sun_path limit.
func shortTempDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func listenFake(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func acceptFake(t *testing.T, ln *net.UnixListener) (*fakeConn, error) {
	ln.SetDeadline(time.Now().Add(5 * time.Second))
	c, err := ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	return &fakeConn{t: t, c: c}, nil
}

// read returns the next request line; it uses ReadMsgUnix so that fds sent
// along with a command are collected.
func (c *fakeConn) read() (fakeRequest, error) {
	for {
		if i := bytes.IndexByte(c.buf, '\n'); i >= 0 {
			line := c.buf[:i]
			c.buf = c.buf[i+1:]
			var r fakeRequest
			if err := json.Unmarshal(line, &r); err != nil {
				return r, fmt.Errorf("bad request %q: %w", line, err)
			}
			return r, nil
		}
		b := make([]byte, 4096)
		oob := make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, err := c.c.ReadMsgUnix(b, oob)
		if err != nil {
			return fakeRequest{}, err
		}
		c.collectFDs(oob[:oobn])
		c.buf = append(c.buf, b[:n]...)
	}
}

func (c *fakeConn) collectFDs(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		c.t.Errorf("fake: parse control message: %v", err)
		return
	}
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			c.t.Errorf("fake: parse rights: %v", err)
			continue
		}
		c.fds = append(c.fds, fds...)
	}
}

func (c *fakeConn) send(line string) {
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		c.t.Logf("fake: write: %v", err)
	}
}

func (c *fakeConn) reply(req fakeRequest, ret string) {
	c.send(fmt.Sprintf(`{"return": %s, "id": %s}`, ret, req.ID))
}

// expect reads one request and checks its command name.
func (c *fakeConn) expect(command string) (fakeRequest, bool) {
	r, err := c.read()
	if err != nil {
		c.t.Errorf("fake: waiting for %s: %v", command, err)
		return r, false
	}
	if r.Execute != command {
		c.t.Errorf("fake: got command %q, want %q", r.Execute, command)
		return r, false
	}
	return r, true
}

func (c *fakeConn) handshake() bool {
	c.send(fakeGreeting)
	r, ok := c.expect("qmp_capabilities")
	if ok {
		c.reply(r, "{}")
	}
	return ok
}

// drain answers nothing and returns when the client hangs up.
func (c *fakeConn) drain() {
	for {
		if _, err := c.read(); err != nil {
			return
		}
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dialFake starts a fake server that performs the handshake and then runs
// script; the connection closes when script returns.
func dialFake(t *testing.T, script func(c *fakeConn)) *Monitor {
	t.Helper()
	path := filepath.Join(shortTempDir(t, "qmpfake"), "qmp.sock")
	ln := listenFake(t, path)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs after the Monitor's Close below
	wg.Go(func() {
		c, err := acceptFake(t, ln)
		if err != nil {
			t.Errorf("fake: accept: %v", err)
			return
		}
		defer c.c.Close()
		if c.handshake() {
			script(c)
		}
	})
	m, err := Dial(testCtx(t, 5*time.Second), path)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

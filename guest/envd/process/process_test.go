package process

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// env is a service behind an in-process Connect server.
type env struct {
	svc    *Service
	client processpbconnect.ProcessClient
	root   string
}

type setup struct {
	cfg  *Config
	user *sandboxfs.User // set on every request, as the envd server does
	opts []connect.ClientOption
}

func newEnv(t *testing.T, st setup) *env {
	t.Helper()
	cfg := Config{Identity: &identity.Store{}}
	if st.cfg != nil {
		cfg = *st.cfg
	} else {
		root, err := sandboxfs.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Root = root
	}
	svc := New(cfg)
	path, h := processpbconnect.NewProcessHandler(svc)
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st.user != nil {
			r = r.WithContext(sandboxfs.WithUser(r.Context(), *st.user))
		}
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { svc.Close(); srv.Close() })
	opts := st.opts
	if opts == nil {
		opts = []connect.ClientOption{connect.WithProtoJSON()} // as the SDK
	}
	return &env{svc: svc, client: processpbconnect.NewProcessClient(srv.Client(), srv.URL, opts...), root: cfg.Root.Dir}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func bash(script string) *processpb.ProcessConfig {
	return &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", script}}
}

func byPid(pid uint32) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
}

func byTag(tag string) *processpb.ProcessSelector {
	return &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: tag}}
}

// result is a whole stream, in order.
type result struct {
	kinds               []string
	stdout, stderr, pty string
	pid                 uint32
	end                 *processpb.ProcessEvent_EndEvent
	keepalives          int
}

func (r *result) add(ev *processpb.ProcessEvent) {
	switch {
	case ev.GetStart() != nil:
		r.kinds = append(r.kinds, "start")
		r.pid = ev.GetStart().GetPid()
	case ev.GetData() != nil:
		r.kinds = append(r.kinds, "data")
		d := ev.GetData()
		r.stdout += string(d.GetStdout())
		r.stderr += string(d.GetStderr())
		r.pty += string(d.GetPty())
	case ev.GetEnd() != nil:
		r.kinds = append(r.kinds, "end")
		r.end = ev.GetEnd()
	case ev.GetKeepalive() != nil:
		r.keepalives++
	}
}

// eventStream is what Start and Connect streams have in common.
type eventStream interface {
	Receive() bool
	Err() error
}

func drain[T interface {
	GetEvent() *processpb.ProcessEvent
}](t *testing.T, s interface {
	eventStream
	Msg() T
}) *result {
	t.Helper()
	r := &result{}
	for s.Receive() {
		r.add(s.Msg().GetEvent())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return r
}

func (e *env) run(t *testing.T, req *processpb.StartRequest) *result {
	t.Helper()
	s, err := e.client.Start(ctxT(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return drain(t, s)
}

// started starts a process and returns its stream after the start event.
func (e *env) started(t *testing.T, ctx context.Context, req *processpb.StartRequest) (*connect.ServerStreamForClient[processpb.StartResponse], uint32) {
	t.Helper()
	s, err := e.client.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if !s.Receive() || s.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("first event is not start: %v %v", s.Msg(), s.Err())
	}
	return s, s.Msg().GetEvent().GetStart().GetPid()
}

// startErr is the error a Start stream fails with (streams report it on
// the first Receive, not on the call).
func (e *env) startErr(t *testing.T, req *processpb.StartRequest) error {
	t.Helper()
	s, err := e.client.Start(ctxT(t), connect.NewRequest(req))
	if err != nil {
		return err
	}
	if s.Receive() {
		t.Fatalf("start succeeded: %v", s.Msg())
	}
	return s.Err()
}

func wantCode(t *testing.T, err error, code connect.Code, msg string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code || !strings.Contains(ce.Message(), msg) {
		t.Fatalf("error = %v; want %v containing %q", err, code, msg)
	}
}

func TestStartEventsExitCode(t *testing.T) {
	codecs := map[string][]connect.ClientOption{"json": {connect.WithProtoJSON()}, "binary": {}}
	for name, opts := range codecs {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, setup{opts: opts})
			r := e.run(t, &processpb.StartRequest{Process: bash("echo hi; echo err >&2; exit 3")})
			if len(r.kinds) < 3 || r.kinds[0] != "start" || r.kinds[len(r.kinds)-1] != "end" || r.pid == 0 {
				t.Fatalf("events %v (pid %d)", r.kinds, r.pid)
			}
			if r.stdout != "hi\n" || r.stderr != "err\n" {
				t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
			}
			end := r.end
			if end.GetExitCode() != 3 || !end.GetExited() || end.GetStatus() != "exit status 3" || end.GetError() != "exit status 3" {
				t.Fatalf("end %v", end)
			}
		})
	}
}

func TestEnvAndCwd(t *testing.T) {
	e := newEnv(t, setup{})
	e.svc.cfg.Identity.Set(identity.Identity{Env: map[string]string{"FROM_HOST": "h", "FOO": "host"}})
	if err := os.MkdirAll(filepath.Join(e.root, "work/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, &processpb.StartRequest{Process: &processpb.ProcessConfig{
		Cmd: "sh", Args: []string{"-c", `echo "$FOO $FROM_HOST $HOME $USER $LOGNAME"; pwd`},
		Envs: map[string]string{"FOO": "req"}, Cwd: new("/work/sub"),
	}})
	want := "req h /root root root\n" + filepath.Join(e.root, "work/sub") + "\n"
	if r.stdout != want || r.end.GetExitCode() != 0 {
		t.Fatalf("stdout %q, want %q (end %v)", r.stdout, want, r.end)
	}
	// No cwd: the home (/root) does not exist under this root, so "/".
	r = e.run(t, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "pwd"}})
	if r.stdout != e.root+"\n" {
		t.Fatalf("default cwd %q, want %q", r.stdout, e.root)
	}
	err := e.startErr(t, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "pwd", Cwd: new("/nope")}})
	wantCode(t, err, connect.CodeInvalidArgument, `cwd "/nope"`)
	err = e.startErr(t, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "no-such-program-x"}})
	wantCode(t, err, connect.CodeInvalidArgument, "no-such-program-x")
	err = e.startErr(t, &processpb.StartRequest{})
	wantCode(t, err, connect.CodeInvalidArgument, "cmd is required")
}

func TestStdinSendStreamClose(t *testing.T) {
	e := newEnv(t, setup{})
	ctx := ctxT(t)
	s, pid := e.started(t, ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "cat"}, Stdin: new(true)})
	_, err := e.client.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
		Process: byPid(pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("abc\n")}},
	}))
	if err != nil {
		t.Fatalf("send input: %v", err)
	}
	in := e.client.StreamInput(ctx)
	msgs := []*processpb.StreamInputRequest{
		{Event: &processpb.StreamInputRequest_Start{Start: &processpb.StreamInputRequest_StartEvent{Process: byPid(pid)}}},
		{Event: &processpb.StreamInputRequest_Keepalive{Keepalive: &processpb.StreamInputRequest_KeepAlive{}}},
		{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{
			Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("def\n")}}}}},
	}
	for _, m := range msgs {
		if err := in.Send(m); err != nil {
			t.Fatalf("stream input: %v", err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatalf("stream input: %v", err)
	}
	if _, err := e.client.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: byPid(pid)})); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	r := drain(t, s)
	if r.stdout != "abc\ndef\n" || r.end.GetExitCode() != 0 {
		t.Fatalf("stdout %q end %v", r.stdout, r.end)
	}
}

func TestBackgroundListKillAndTag(t *testing.T) {
	e := newEnv(t, setup{})
	ctx, cancel := context.WithCancel(ctxT(t))
	_, pid := e.started(t, ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"30"}}, Tag: new("bg")})
	cancel() // the client goes away; the process must not

	list, err := e.client.List(ctxT(t), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil || len(list.Msg.GetProcesses()) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	if p := list.Msg.GetProcesses()[0]; p.GetPid() != pid || p.GetTag() != "bg" || p.GetConfig().GetCmd() != "sleep" {
		t.Fatalf("listed %v, want pid %d tag bg", p, pid)
	}
	_, err = e.client.SendInput(ctxT(t), connect.NewRequest(&processpb.SendInputRequest{
		Process: byTag("bg"), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("x")}},
	}))
	wantCode(t, err, connect.CodeFailedPrecondition, "without stdin")

	conn, err := e.client.Connect(ctxT(t), connect.NewRequest(&processpb.ConnectRequest{Process: byTag("bg")}))
	if err != nil {
		t.Fatal(err)
	}
	if !conn.Receive() || conn.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("connect first event %v %v", conn.Msg(), conn.Err())
	}
	if _, err := e.client.SendSignal(ctxT(t), connect.NewRequest(&processpb.SendSignalRequest{Process: byPid(pid), Signal: processpb.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatalf("signal: %v", err)
	}
	r := drain(t, conn)
	if end := r.end; end == nil || end.GetExited() || end.GetExitCode() != -1 || end.GetStatus() != "signal: killed" {
		t.Fatalf("end after kill: %v", r.end)
	}
	list, _ = e.client.List(ctxT(t), connect.NewRequest(&processpb.ListRequest{}))
	if n := len(list.Msg.GetProcesses()); n != 0 {
		t.Fatalf("%d processes listed after kill", n)
	}
	_, err = e.client.SendSignal(ctxT(t), connect.NewRequest(&processpb.SendSignalRequest{Process: byPid(pid), Signal: processpb.Signal_SIGNAL_SIGKILL}))
	wantCode(t, err, connect.CodeNotFound, "not found")
}

func TestConnectSecondClient(t *testing.T) {
	e := newEnv(t, setup{})
	ctx := ctxT(t)
	first, pid := e.started(t, ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "cat"}, Stdin: new(true)})
	second, err := e.client.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: byPid(pid)}))
	if err != nil {
		t.Fatal(err)
	}
	if !second.Receive() || second.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("connect first event %v %v", second.Msg(), second.Err())
	}
	_, err = e.client.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
		Process: byPid(pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("later\n")}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: byPid(pid)})); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*result{"start stream": drain(t, first), "connect stream": drain(t, second)} {
		if r.stdout != "later\n" || r.end.GetExitCode() != 0 || !r.end.GetExited() {
			t.Errorf("%s: stdout %q end %v", name, r.stdout, r.end)
		}
	}
}

func TestPTY(t *testing.T) {
	e := newEnv(t, setup{})
	ctx := ctxT(t)
	s, pid := e.started(t, ctx, &processpb.StartRequest{
		Process: bash(`tty; stty size; echo "term=$TERM"; read line; stty size`),
		Pty:     &processpb.PTY{Size: &processpb.PTY_Size{Cols: 100, Rows: 30}},
	})
	r := &result{}
	for !strings.Contains(r.pty, "term=") {
		if !s.Receive() {
			t.Fatalf("stream ended early: %v; pty %q", s.Err(), r.pty)
		}
		r.add(s.Msg().GetEvent())
	}
	if !strings.Contains(r.pty, "/dev/pts/") || !strings.Contains(r.pty, "30 100") || !strings.Contains(r.pty, "term=xterm-256color") {
		t.Fatalf("pty output %q", r.pty)
	}
	_, err := e.client.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: byPid(pid), Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: 120, Rows: 40}}}))
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	_, err = e.client.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
		Process: byPid(pid), Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte("go\n")}},
	}))
	if err != nil {
		t.Fatalf("pty input: %v", err)
	}
	rest := drain(t, s)
	if !strings.Contains(rest.pty, "40 120") || rest.end.GetExitCode() != 0 || rest.stdout != "" {
		t.Fatalf("after resize %q, end %v", rest.pty, rest.end)
	}
	_, err = e.client.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: byPid(pid)}))
	wantCode(t, err, connect.CodeNotFound, "not found") // it has exited
}

func TestNotFoundAndBadInput(t *testing.T) {
	e := newEnv(t, setup{})
	ctx := ctxT(t)
	_, err := e.client.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: byPid(999999), Signal: processpb.Signal_SIGNAL_SIGTERM}))
	wantCode(t, err, connect.CodeNotFound, "process with pid 999999 not found")
	_, err = e.client.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{Process: byTag("nope")}))
	wantCode(t, err, connect.CodeNotFound, `process with tag "nope" not found`)
	_, err = e.client.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{}))
	wantCode(t, err, connect.CodeInvalidArgument, "pid or a tag")
	_, err = e.client.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: byPid(1)}))
	wantCode(t, err, connect.CodeInvalidArgument, "unsupported signal")
	c, err := e.client.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: byTag("nope")}))
	if err == nil {
		c.Receive()
		err = c.Err()
	}
	wantCode(t, err, connect.CodeNotFound, `tag "nope"`)
	in := e.client.StreamInput(ctx)
	_ = in.Send(&processpb.StreamInputRequest{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{}}})
	_, err = in.CloseAndReceive()
	wantCode(t, err, connect.CodeInvalidArgument, "start event")
}

func TestKeepalive(t *testing.T) {
	e := newEnv(t, setup{})
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"1.3"}}})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	s, err := e.client.Start(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := drain(t, s); r.keepalives < 1 || r.end.GetExitCode() != 0 {
		t.Fatalf("keepalives %d end %v", r.keepalives, r.end)
	}
}

func TestRunAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("run as root: the test starts a process as another user")
	}
	root, _ := sandboxfs.New("/")
	nobody := sandboxfs.User{Name: "nobody", UID: 65534, GID: 65534, Home: "/nonexistent"}
	e := newEnv(t, setup{cfg: &Config{Root: root}, user: &nobody})
	r := e.run(t, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "sh", Args: []string{"-c", "id -u; id -g; pwd; echo $HOME $USER"}}})
	if want := "65534\n65534\n/\n/nonexistent nobody\n"; r.stdout != want {
		t.Fatalf("stdout %q, want %q (stderr %q)", r.stdout, want, r.stderr)
	}
}

func TestCloseKillsProcesses(t *testing.T) {
	e := newEnv(t, setup{})
	s, _ := e.started(t, ctxT(t), &processpb.StartRequest{Process: bash("sleep 30")})
	e.svc.Close()
	if r := drain(t, s); r.end.GetStatus() != "signal: killed" {
		t.Fatalf("end after Close: %v", r.end)
	}
	err := e.startErr(t, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "true"}})
	wantCode(t, err, connect.CodeUnavailable, "shutting down")
}

func TestSlowSubscriber(t *testing.T) {
	sub := newSubscriber()
	sub.stall = 100 * time.Millisecond
	chunk := dataEvent(stdout, make([]byte, readChunk))
	for range maxBuffered / readChunk {
		if !sub.push(chunk, readChunk) {
			t.Fatal("push into a buffer with room failed")
		}
	}
	// A full buffer holds the output back until the stream takes some...
	go func() { time.Sleep(20 * time.Millisecond); sub.take() }()
	if !sub.push(chunk, readChunk) {
		t.Fatal("push after take failed")
	}
	for sub.bytes+readChunk <= maxBuffered {
		sub.push(chunk, readChunk)
	}
	// ...but a stream that takes nothing is dropped instead of blocking.
	start := time.Now()
	if sub.push(chunk, readChunk) || time.Since(start) < sub.stall {
		t.Fatalf("stalled subscriber not dropped after %v", sub.stall)
	}
	if q, err := sub.take(); len(q) != 0 || connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("after the drop: %d events, %v", len(q), err)
	}
	if sub.push(startEvent(1), 0) {
		t.Fatal("push to a dropped subscriber succeeded")
	}
}

func TestLargeOutputDelivered(t *testing.T) {
	e := newEnv(t, setup{})
	const n = 3 * maxBuffered // more than a subscriber buffers: the client must not be dropped
	s, err := e.client.Start(ctxT(t), connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "head", Args: []string{"-c", strconv.Itoa(n), "/dev/zero"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	total, ended := 0, false
	for s.Receive() {
		total += len(s.Msg().GetEvent().GetData().GetStdout())
		ended = ended || s.Msg().GetEvent().GetEnd().GetExited()
	}
	if s.Err() != nil || total != n || !ended {
		t.Fatalf("got %d of %d bytes, ended %v, err %v", total, n, ended, s.Err())
	}
}

func TestGrandchildHoldingOutput(t *testing.T) {
	e := newEnv(t, setup{})
	start := time.Now()
	// The background sleep keeps stdout open; the end must not wait for it.
	r := e.run(t, &processpb.StartRequest{Process: bash("sleep 5 & echo hi")})
	t.Cleanup(func() { _ = unix.Kill(-int(r.pid), unix.SIGKILL) })
	if r.stdout != "hi\n" || r.end.GetExitCode() != 0 || time.Since(start) > 3*time.Second {
		t.Fatalf("stdout %q end %v after %v", r.stdout, r.end, time.Since(start))
	}
}

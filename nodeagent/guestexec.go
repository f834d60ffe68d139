package nodeagent

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"connectrpc.com/connect"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
)

// guestExec runs commands in a VM and writes files into it through its
// guest agent's envd API on the pod IP, with the sandbox's access token:
// the path a user's own commands take, so a build step runs exactly as
// a sandbox command would.
type guestExec struct {
	base  string // http://<pod IP>:49983
	token string
	hc    *http.Client
}

func newGuestExec(podIP, token string) *guestExec {
	// A connection per call: builds are few, and a kept-alive connection
	// would outlive nothing useful.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return &guestExec{base: "http://" + net.JoinHostPort(podIP, strconv.Itoa(sandlotv1.EnvdPort)), token: token, hc: hc}
}

// maxGuestMessage bounds one message of a builder guest's process stream
// (envd sends output in chunks of tens of KiB): the guest may lie, and
// one endless message would grow the agent, which every VM on the node
// depends on. Over it the stream fails (connect's resource_exhausted).
const maxGuestMessage = 1 << 20

// execRequest is one command: run by sh -c as user ("" = the guest's
// default) in cwd ("" = the user's home) with env added.
type execRequest struct {
	Cmd, User, Cwd string
	Env            map[string]string
	// Background returns once the process started; it keeps running.
	Background bool
}

// run runs req and calls out with each chunk of its output (stdout and
// stderr interleaved as they come); it returns the exit code.
func (g *guestExec) run(ctx context.Context, req execRequest, out func([]byte)) (int, error) {
	pc := processpbconnect.NewProcessClient(g.hc, g.base, connect.WithProtoJSON(), connect.WithReadMaxBytes(maxGuestMessage))
	cfg := &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", req.Cmd}, Envs: req.Env}
	if req.Cwd != "" {
		cfg.Cwd = &req.Cwd
	}
	creq := connect.NewRequest(&processpb.StartRequest{Process: cfg})
	g.authorize(creq.Header(), req.User)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a background process outlives its stream
	stream, err := pc.Start(ctx, creq)
	if err != nil {
		return 0, fmt.Errorf("envd at %s: %w", g.base, err)
	}
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil && req.Background:
			return 0, nil
		case ev.GetData() != nil:
			d := ev.GetData()
			out(append(d.GetStdout(), d.GetStderr()...))
		case ev.GetEnd() != nil:
			end := ev.GetEnd()
			if end.Error != nil && *end.Error != "" && !end.GetExited() {
				return 0, fmt.Errorf("envd: %s", *end.Error)
			}
			return int(end.GetExitCode()), nil
		}
	}
	if err := stream.Err(); err != nil && err != io.EOF {
		return 0, fmt.Errorf("envd stream of %q: %w", req.Cmd, err)
	}
	return 0, fmt.Errorf("envd ended %q without its exit status", req.Cmd)
}

// write puts data at path in the guest, as root.
func (g *guestExec) write(ctx context.Context, path string, data []byte) error {
	u := g.base + "/files?" + url.Values{"path": {path}, "username": {"root"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	g.authorize(req.Header, "root")
	resp, err := g.hc.Do(req)
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("upload %s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// authorize sets the token and, as envd reads it, the user.
func (g *guestExec) authorize(h http.Header, user string) {
	h.Set("X-Access-Token", g.token)
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
)

// opTimeout bounds one operation as a patient SDK user would (TCG).
const opTimeout = 3 * time.Minute

// e2b is an E2B SDK's wire client: the API with a key, and envd through
// sandlot-api's proxy (sandbox URL mode: the E2B headers route).
type e2b struct {
	api, key string
	hc       *http.Client
}

// box is a sandbox as a client holds it.
type box struct{ id, token string }

// apiError is an answer other than the one expected.
type apiError struct {
	code int
	body string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.code, strings.TrimSpace(e.body)) }

// call sends a JSON request and decodes a want answer into out.
func (c *e2b) call(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.api+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-API-KEY", c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %w", method, path, &apiError{resp.StatusCode, string(data)})
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: %w in %s", method, path, err, data)
		}
	}
	return nil
}

type sandboxJSON struct {
	SandboxID       string `json:"sandboxID"`
	EnvdAccessToken string `json:"envdAccessToken"`
}

// create is Sandbox.create(template).
func (c *e2b) create(ctx context.Context, template string) (box, error) {
	var s sandboxJSON
	err := c.call(ctx, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": template, "timeout": 1800}, http.StatusCreated, &s)
	return box{s.SandboxID, s.EnvdAccessToken}, err
}

func (c *e2b) kill(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/sandboxes/"+id, nil, http.StatusNoContent, nil)
}

func (c *e2b) pause(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/sandboxes/"+id+"/pause", nil, http.StatusNoContent, nil)
}

// connect is Sandbox.connect: it resumes a paused sandbox.
func (c *e2b) connect(ctx context.Context, id string) error {
	var s sandboxJSON
	err := c.call(ctx, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 1800}, http.StatusCreated, &s)
	var ae *apiError
	if err != nil && errors.As(err, &ae) && ae.code == http.StatusOK {
		return nil // already running: connect answers 200
	}
	return err
}

func (c *e2b) snapshot(ctx context.Context, id string) (string, error) {
	var s struct {
		SnapshotID string `json:"snapshotID"`
	}
	err := c.call(ctx, http.MethodPost, "/sandboxes/"+id+"/snapshots", map[string]any{}, http.StatusCreated, &s)
	return s.SnapshotID, err
}

// deleteSnapshot is E2B's delete of a snapshot (as of a template).
func (c *e2b) deleteSnapshot(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/templates/"+id, nil, http.StatusNoContent, nil)
}

func (c *e2b) fork(ctx context.Context, id string) (box, error) {
	var res []struct {
		Sandbox *sandboxJSON `json:"sandbox"`
		Error   *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := c.call(ctx, http.MethodPost, "/sandboxes/"+id+"/fork", map[string]any{"count": 1, "timeout": 1800}, http.StatusCreated, &res); err != nil {
		return box{}, err
	}
	if len(res) != 1 || res[0].Sandbox == nil {
		if len(res) == 1 && res[0].Error != nil {
			return box{}, fmt.Errorf("fork of %s: %s", id, res[0].Error.Message)
		}
		return box{}, fmt.Errorf("fork of %s: %d results", id, len(res))
	}
	return box{res[0].Sandbox.SandboxID, res[0].Sandbox.EnvdAccessToken}, nil
}

func (c *e2b) rollback(ctx context.Context, id, snapshot string) error {
	return c.call(ctx, http.MethodPost, "/sandboxes/"+id+"/rollback", map[string]any{"snapshotID": snapshot}, http.StatusOK, nil)
}

// exists is GET /sandboxes/{id}: false on 404.
func (c *e2b) exists(ctx context.Context, id string) (bool, error) {
	err := c.call(ctx, http.MethodGet, "/sandboxes/"+id, nil, http.StatusOK, nil)
	var ae *apiError
	if err != nil && errors.As(err, &ae) && ae.code == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

// routed sets the headers sandlot-api's proxy routes envd traffic by.
func routed(h http.Header, b box) {
	h.Set("E2b-Sandbox-Id", b.id)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(sandlotv1.EnvdPort))
	if b.token != "" {
		h.Set("X-Access-Token", b.token)
	}
}

// bodyOnError is a transport that puts the body of a 5xx answer the
// proxy gave (its reason: paused, not running, unreachable and why) into
// the error, where the Connect client names only the status.
type bodyOnError struct{ next http.RoundTripper }

func (t bodyOnError) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil || resp.StatusCode < 500 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return nil, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, &apiError{resp.StatusCode, string(b)})
}

// run is commands.run(cmd): its stdout, an error unless it exited 0.
func (c *e2b) run(ctx context.Context, b box, cmd string) (string, error) {
	hc := &http.Client{Transport: bodyOnError{c.hc.Transport}}
	pc := processpbconnect.NewProcessClient(hc, c.api, connect.WithProtoJSON())
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}})
	routed(req.Header(), b)
	stream, err := pc.Start(ctx, req)
	if err != nil {
		return "", fmt.Errorf("run %q: %w", cmd, err)
	}
	defer stream.Close()
	var out, errOut strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		errOut.Write(ev.GetData().GetStderr())
		if end := ev.GetEnd(); end != nil {
			if end.GetExitCode() != 0 {
				return out.String(), fmt.Errorf("run %q: exit %d: %s", cmd, end.GetExitCode(), errOut.String())
			}
			return out.String(), nil
		}
	}
	if err := stream.Err(); err != nil {
		return out.String(), fmt.Errorf("run %q: %w", cmd, err)
	}
	return out.String(), fmt.Errorf("run %q: the stream ended without the process's end", cmd)
}

// write is files.write(path, content): envd's POST /files.
func (c *e2b) write(ctx context.Context, b box, path, content string) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("file", path)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(fw, content); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.api+"/files?"+url.Values{"path": {path}}.Encode(), &body)
	if err != nil {
		return err
	}
	routed(req.Header, b)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("write %s: %w", path, &apiError{resp.StatusCode, string(data)})
	}
	return nil
}

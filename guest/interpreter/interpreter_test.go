package interpreter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// testPython prefers the system interpreter: a pyenv shim in PATH costs
// ~100 ms per kernel start. SANDLOT_TEST_PYTHON overrides it.
func testPython(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SANDLOT_TEST_PYTHON"); p != "" {
		return p // to check other Python versions
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

type fixture struct {
	t   *testing.T
	srv *Server
	url string
	cwd string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	t.Parallel()
	cwd := t.TempDir()
	s, err := New(Config{Python: testPython(t), Cwd: cwd, Env: func() map[string]string {
		return map[string]string{"SANDLOT_TEST_GLOBAL": "from-sandbox"}
	}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	return &fixture{t: t, srv: s, url: ts.URL, cwd: cwd}
}

// msg is one decoded NDJSON line.
type msg map[string]any

func (m msg) str(k string) string { s, _ := m[k].(string); return s }

// run executes code and returns every message, checking the stream ends
// with end_of_execution.
func (f *fixture) run(body map[string]any) []msg {
	f.t.Helper()
	msgs, _ := f.runCtx(context.Background(), body, nil)
	return msgs
}

func (f *fixture) runCtx(ctx context.Context, body map[string]any, each func(msg) bool) ([]msg, error) {
	f.t.Helper()
	resp := f.post(ctx, "/execute", body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		f.t.Fatalf("execute: status %d: %s", resp.StatusCode, b)
	}
	var out []msg
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var m msg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			f.t.Fatalf("bad NDJSON line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
		if each != nil && !each(m) {
			return out, nil
		}
	}
	if err := sc.Err(); err != nil {
		return out, err
	}
	if len(out) == 0 || out[len(out)-1].str("type") != "end_of_execution" {
		f.t.Fatalf("stream does not end with end_of_execution: %v", out)
	}
	return out[:len(out)-1], nil
}

func (f *fixture) post(ctx context.Context, path string, body any) *http.Response {
	f.t.Helper()
	var r io.Reader = http.NoBody
	switch b := body.(type) {
	case string:
		r = strings.NewReader(b)
	case nil:
	default:
		j, _ := json.Marshal(b)
		r = bytes.NewReader(j)
	}
	return f.do(ctx, http.MethodPost, path, r)
}

func (f *fixture) do(ctx context.Context, method, path string, body io.Reader) *http.Response {
	f.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, f.url+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// status sends a request and returns its status and body.
func (f *fixture) status(method, path string, body any) (int, string) {
	f.t.Helper()
	var resp *http.Response
	if method == http.MethodPost {
		resp = f.post(context.Background(), path, body)
	} else {
		resp = f.do(context.Background(), method, path, nil)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) newContext(body map[string]any) Context {
	f.t.Helper()
	code, b := f.status(http.MethodPost, "/contexts", body)
	if code != http.StatusOK {
		f.t.Fatalf("create context: %d %s", code, b)
	}
	var c Context
	if err := json.Unmarshal([]byte(b), &c); err != nil || c.ID == "" {
		f.t.Fatalf("context JSON %q: %v", b, err)
	}
	return c
}

func ofType(msgs []msg, typ string) []msg {
	var out []msg
	for _, m := range msgs {
		if m.str("type") == typ {
			out = append(out, m)
		}
	}
	return out
}

func mainText(t *testing.T, msgs []msg) string {
	t.Helper()
	for _, m := range ofType(msgs, "result") {
		if m["is_main_result"] == true {
			return m.str("text")
		}
	}
	t.Fatalf("no main result in %v", msgs)
	return ""
}

func stdout(msgs []msg) string {
	var b strings.Builder
	for _, m := range ofType(msgs, "stdout") {
		b.WriteString(m.str("text"))
	}
	return b.String()
}

func code(c string) map[string]any { return map[string]any{"code": c} }

func inContext(id, c string) map[string]any { return map[string]any{"code": c, "context_id": id} }

func mustError(t *testing.T, msgs []msg, name string) msg {
	t.Helper()
	errs := ofType(msgs, "error")
	if len(errs) != 1 || errs[0].str("name") != name {
		t.Fatalf("want one %s error, got %v", name, msgs)
	}
	return errs[0]
}

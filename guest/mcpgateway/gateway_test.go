package mcpgateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	apimcp "github.com/sandlot-dev/sandlot/api/mcp"
)

// The test binary is also a stdio MCP server (roleEnv=backend, its tools
// named by toolsEnv) and the gateway's daemon (`serve`, as Start runs it).
const (
	roleEnv  = "MCPGW_TEST_ROLE"
	toolsEnv = "MCPGW_TEST_TOOLS"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(roleEnv) == "backend":
		backend()
		return
	case len(os.Args) > 1 && os.Args[1] == "serve":
		if err := ServeCommand(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

type textIn struct {
	Text string `json:"text"`
}

func backend() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test-backend"}, nil)
	for _, name := range strings.Split(os.Getenv(toolsEnv), ",") {
		switch name {
		case "echo":
			mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "says text back"}, func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
			})
		case "env":
			mcp.AddTool(srv, &mcp.Tool{Name: "env", Description: "a variable of its environment"}, func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: os.Getenv(in.Text)}}}, nil, nil
			})
		}
	}
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// backendServer is a server of tools run by this test binary.
func backendServer(key, tools string) apimcp.Server {
	self, _ := os.Executable()
	return apimcp.Server{Key: key, RunCmd: "exec " + strconv.Quote(self),
		Envs: map[string]string{roleEnv: "backend", toolsEnv: tools, "SECRET_OF_" + strings.ToUpper(strings.ReplaceAll(tools, ",", "_")): "value-" + tools}}
}

// client connects to a gateway at url with token (none: "").
func client(t *testing.T, url, token string) (*mcp.ClientSession, error) {
	t.Helper()
	hc := &http.Client{Transport: bearer{token}}
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func call(t *testing.T, s *mcp.ClientSession, tool, text string) string {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": text}})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("call %s: %d contents", tool, len(res.Content))
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// TestGatewayServesEveryServersTools: two servers' tools through one
// endpoint, each call reaching its own server with its own envs; no
// token or a wrong one is 401.
func TestGatewayServesEveryServersTools(t *testing.T) {
	ctx := context.Background()
	var backends []*Backend
	for _, s := range []apimcp.Server{backendServer("github/a/echo", "echo"), backendServer("github/b/env", "env")} {
		b, err := Connect(ctx, s, t.TempDir(), os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		backends = append(backends, b)
	}
	srv, err := NewServer(backends)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(Handler(srv, "tok"))
	defer hs.Close()
	s, err := client(t, hs.URL+apimcp.Path, "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var names []string
	for tool, err := range s.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "echo,env" {
		t.Errorf("tools %v, want echo and env", names)
	}
	if got := call(t, s, "echo", "hello"); got != "hello" {
		t.Errorf("echo: %q", got)
	}
	if got, other := call(t, s, "env", "SECRET_OF_ENV"), call(t, s, "env", "SECRET_OF_ECHO"); got != "value-env" || other != "" {
		t.Errorf("env server sees its variable %q and the other server's %q", got, other)
	}
	for _, token := range []string{"", "wrong"} {
		if _, err := client(t, hs.URL+apimcp.Path, token); err == nil {
			t.Errorf("token %q: connected", token)
		}
		req, _ := http.NewRequest("POST", hs.URL+apimcp.Path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: %v %v, want 401", token, resp.Status, err)
		}
	}
}

func TestSameToolTwiceRefused(t *testing.T) {
	var backends []*Backend
	for _, key := range []string{"github/a/one", "github/b/two"} {
		b, err := Connect(context.Background(), backendServer(key, "echo"), t.TempDir(), os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Session.Close()
		backends = append(backends, b)
	}
	_, err := NewServer(backends)
	if err == nil || !strings.Contains(err.Error(), "github/a/one and github/b/two") {
		t.Fatalf("two servers offering echo: %v", err)
	}
}

// repo makes a git repository for github.com/acme/tools and redirects
// that URL to it (git's insteadOf, in the environment).
func repo(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "acme", "tools")
	for _, args := range [][]string{{"init", "-q", "-b", "main", dir}, {"-C", dir, "commit", "-q", "--allow-empty", "-m", "tools"}} {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s (install git)", args, err, b)
		}
	}
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "url.file://"+base+"/.insteadOf")
	t.Setenv("GIT_CONFIG_VALUE_0", "https://github.com/")
}

func testPaths(t *testing.T) Paths {
	d := t.TempDir()
	return Paths{TokenFile: filepath.Join(d, "etc", ".token"), ConfigFile: filepath.Join(d, "etc", "config.json"),
		Servers: filepath.Join(d, "servers"), Log: filepath.Join(d, "gateway.log"), PIDFile: filepath.Join(d, "gateway.pid")}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// stopDaemon kills the daemon Start left running.
func stopDaemon(t *testing.T, p Paths) {
	t.Cleanup(func() {
		b, err := os.ReadFile(p.PIDFile)
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

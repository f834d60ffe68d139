// Package mcpgateway is the MCP gateway sandlot's templates ship as
// `mcp-gateway`, the command E2B's SDKs run in a sandbox created with
// `mcp` (api/mcp says which servers it runs): it starts each server as a
// stdio MCP server and serves their tools as one MCP server over the
// streamable HTTP transport on api/mcp.Port, behind the SDK's token.
package mcpgateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	apimcp "github.com/sandlot-dev/sandlot/api/mcp"
	"github.com/sandlot-dev/sandlot/guest/httpserve"
	"github.com/sandlot-dev/sandlot/internal/version"
)

// Backend is one running MCP server and the tools it offers.
type Backend struct {
	Server  apimcp.Server
	Session *mcp.ClientSession
	Tools   []*mcp.Tool
}

// Connect starts s's runCmd in dir (its clone) as a stdio MCP server,
// its stderr to logs, and lists its tools.
func Connect(ctx context.Context, s apimcp.Server, dir string, logs io.Writer) (*Backend, error) {
	cmd := exec.Command("/bin/sh", "-c", s.RunCmd)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, withEnvs(os.Environ(), s.Envs), logs
	client := mcp.NewClient(&mcp.Implementation{Name: "sandlot-mcp-gateway", Version: version.Version}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: start %q: %w", s.Key, s.RunCmd, err)
	}
	b := &Backend{Server: s, Session: session}
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			_ = session.Close()
			return nil, fmt.Errorf("%s: list its tools: %w", s.Key, err)
		}
		b.Tools = append(b.Tools, t)
	}
	return b, nil
}

// NewServer is one MCP server offering every backend's tools, each call
// forwarded to the backend that offers it; two backends offering one
// name is an error naming both (the gateway does not rename tools).
func NewServer(backends []*Backend) (*mcp.Server, error) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "sandlot-mcp-gateway", Version: version.Version}, nil)
	owner := map[string]string{}
	for _, b := range backends {
		for _, t := range b.Tools {
			if other, dup := owner[t.Name]; dup {
				return nil, fmt.Errorf("tool %q is offered by both %s and %s", t.Name, other, b.Server.Key)
			}
			if err := objectSchema(t.InputSchema); err != nil {
				return nil, fmt.Errorf("%s: tool %q: %w", b.Server.Key, t.Name, err)
			}
			owner[t.Name] = b.Server.Key
			srv.AddTool(t, forward(b.Session, t.Name))
		}
	}
	return srv, nil
}

// objectSchema: MCP wants a tool's input schema to be an object's (the
// SDK's AddTool panics on another).
func objectSchema(schema any) error {
	var m map[string]any
	b, err := json.Marshal(schema)
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil || m["type"] != "object" {
		return errors.New(`its input schema is not of type "object"`)
	}
	return nil
}

func forward(session *mcp.ClientSession, name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args any
		if raw := req.Params.Arguments; len(raw) > 0 {
			args = raw
		}
		return session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	}
}

// Handler serves srv at api/mcp.Path to callers presenting the token.
func Handler(srv *mcp.Server, token string) http.Handler {
	// The gateway is reached through the sandbox proxy, whose connection
	// into the VM may arrive on loopback with the sandbox's host name: the
	// SDK's DNS-rebinding guard (for unauthenticated local servers) would
	// refuse it; every request here carries the token instead.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
	mux := http.NewServeMux()
	mux.Handle(apimcp.Path, requireToken(token, h))
	return mux
}

func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			httpserve.Refuse(w)
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-gateway"`)
			http.Error(w, "missing or wrong MCP gateway token (Authorization: Bearer <sandbox.getMcpToken()>)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Serve answers on ln until ctx ends, then closes the backends.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, backends []*Backend) error {
	srv := httpserve.New(ln.Addr().String(), h)
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	err := srv.Serve(ln)
	for _, b := range backends {
		_ = b.Session.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// withEnvs is env with envs set (replacing a variable env has).
func withEnvs(env []string, envs map[string]string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		_, set := envs[name]
		return set
	})
	for k, v := range envs {
		out = append(out, k+"="+v)
	}
	return out
}

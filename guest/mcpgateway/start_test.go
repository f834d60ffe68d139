package mcpgateway

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apimcp "github.com/sandlot-dev/sandlot/api/mcp"
)

func config(t *testing.T, s apimcp.Server) []byte {
	b, err := json.Marshal(map[string]any{s.Key: map[string]any{"runCmd": s.RunCmd, "installCmd": s.InstallCmd, "envs": s.Envs}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStartClonesInstallsAndServes: as the SDK runs it: the repository
// cloned, installCmd run in it, the daemon serving once Start returns,
// the token readable by root only and in no server's environment.
func TestStartClonesInstallsAndServes(t *testing.T) {
	repo(t)
	p, addr := testPaths(t), freeAddr(t)
	stopDaemon(t, p)
	s := backendServer("github/acme/tools", "echo,env")
	s.InstallCmd = "pwd > installed-here"
	self, _ := os.Executable()
	t.Setenv(apimcp.TokenEnv, "tok-1") // as the SDK runs it
	if err := Start(context.Background(), config(t, s), "tok-1", self, addr, p, io.Discard); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(p.Servers, "acme", "tools")
	if b, err := os.ReadFile(filepath.Join(dir, "installed-here")); err != nil || strings.TrimSpace(string(b)) != dir {
		t.Errorf("installCmd ran in %q (%v), want %s", b, err, dir)
	}
	if fi, err := os.Stat(p.TokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v %v", fi.Mode(), err)
	}
	session, err := client(t, "http://"+addr+apimcp.Path, "tok-1")
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if got := call(t, session, "echo", "through the daemon"); got != "through the daemon" {
		t.Errorf("echo: %q", got)
	}
	if got := call(t, session, "env", apimcp.TokenEnv); got != "" {
		t.Errorf("a server (anyone's code) inherited the gateway's token: %q", got)
	}
	// A second start while it runs says why it cannot.
	err = Start(context.Background(), config(t, s), "tok-2", self, addr, p, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "is a gateway running already?") {
		t.Errorf("second start: %v", err)
	}
	if b, _ := os.ReadFile(p.TokenFile); string(b) != "tok-1" {
		t.Errorf("after a second start the token file says %q, the running gateway's is tok-1", b)
	}
}

// TestStartSaysWhy: each way a start fails names the server and the
// cause, and nothing is left serving.
func TestStartSaysWhy(t *testing.T) {
	repo(t)
	self, _ := os.Executable()
	for _, tc := range []struct {
		name, config, want string
	}{
		{"catalog server", `{"duckduckgo":{}}`, `"duckduckgo": a server of Docker's MCP catalog`},
		{"no runCmd", `{"github/acme/tools":{"installCmd":"true"}}`, "runCmd is required"},
		{"unknown field", `{"github/acme/tools":{"runCmd":"x","image":"y"}}`, `unknown field "image"`},
		{"missing repository", `{"github/acme/nothing":{"runCmd":"true"}}`, "github/acme/nothing: git clone https://github.com/acme/nothing"},
		{"install fails", `{"github/acme/tools":{"runCmd":"true","installCmd":"echo no compiler >&2; exit 3"}}`, "no compiler"},
		{"server not MCP", `{"github/acme/tools":{"runCmd":"echo hello; exit 0"}}`, "the gateway did not start: github/acme/tools: start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, addr := testPaths(t), freeAddr(t)
			stopDaemon(t, p)
			err := Start(context.Background(), []byte(tc.config), "tok", self, addr, p, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if _, err := client(t, "http://"+addr+apimcp.Path, "tok"); err == nil {
				t.Errorf("a gateway serves after a failed start")
			}
		})
	}
}

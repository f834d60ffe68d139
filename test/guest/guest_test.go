package guest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/test/guest"
)

// TestE2BSDK runs sdk.test.mjs (the real e2b and @e2b/code-interpreter
// packages) against the agent; every SDK call there is an assertion.
func TestE2BSDK(t *testing.T) {
	startAgent(t)
	if err := guest.NPMInstall(); err != nil {
		t.Fatal(err)
	}
	if err := guest.Run(guest.SDKEnv, "node", "--test", "--test-concurrency=1", "sdk.test.mjs"); err != nil {
		t.Fatal(err)
	}
}

// TestControlChannel: the host's control channel reaches the agent binary;
// an identity pushed through it (token, env) takes effect on the envd API.
func TestControlChannel(t *testing.T) {
	agent := startAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, agent.Control)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ping, err := c.Ping(ctx)
	if err != nil || ping.BootID == "" {
		t.Fatalf("ping: %+v, %v", ping, err)
	}
	id := identity.Identity{SandboxID: "abcdefghij0123456789", AccessToken: "tok-1", Env: map[string]string{"FROM_HOST": "yes"}}
	if _, err := c.SetIdentity(ctx, id, []byte("seed")); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, "/envs", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /envs without the pushed token: %d, want 401", code)
	}
	if code, body := get(t, "/envs", "tok-1"); code != 200 || !strings.Contains(body, `"FROM_HOST":"yes"`) {
		t.Fatalf("GET /envs with the token: %d %s", code, body)
	}
	if _, err := c.PrepareSnapshot(ctx, false); err != nil {
		t.Fatal(err)
	}
}

// startAgent builds and starts the agent until the test ends.
func startAgent(t *testing.T) *guest.Agent {
	t.Helper()
	if err := guest.CheckTools(); err != nil {
		t.Fatal(err)
	}
	bin, err := guest.BuildAgent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	agent, err := guest.StartAgent(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	return agent
}

func get(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://127.0.0.1:49983"+path, nil)
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

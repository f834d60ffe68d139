package mcpgateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	apimcp "github.com/sandlot-dev/sandlot/api/mcp"
)

// Paths are where a gateway keeps its state; tests put them in a
// temporary directory.
type Paths struct {
	TokenFile  string // the token (root only): api/mcp.TokenFile
	ConfigFile string // the configuration the daemon serves (root only: envs)
	Servers    string // the servers' clones, <Servers>/<owner>/<repo>
	Log        string // the daemon's log and its servers' stderr
	PIDFile    string // the daemon's process ID
}

// DefaultPaths are the sandbox's.
var DefaultPaths = Paths{TokenFile: apimcp.TokenFile, ConfigFile: "/etc/mcp-gateway/config.json",
	Servers: "/opt/mcp-gateway/servers", Log: "/var/log/mcp-gateway.log", PIDFile: "/run/mcp-gateway.pid"}

// readyTimeout bounds the daemon's start: every server started and its
// tools listed (an npx or uvx server may download first; TCG is slow).
const readyTimeout = 3 * time.Minute

// Start prepares each server of raw (a clone of its repository, its
// installCmd), then starts the gateway as a daemon of its own session
// (self serve) and returns once it answers on addr, or with why not.
// It writes token (a new one when empty) to the token file.
func Start(ctx context.Context, raw []byte, token, self, addr string, p Paths, out io.Writer) error {
	servers, err := apimcp.Parse(raw)
	if err != nil {
		return err
	}
	// A running gateway keeps its token file: a second start stops here.
	if err := portFree(addr); err != nil {
		return err
	}
	if token == "" {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		token = hex.EncodeToString(b)
	}
	if err := writePrivate(p.TokenFile, []byte(token)); err != nil {
		return err
	}
	if err := writePrivate(p.ConfigFile, raw); err != nil {
		return err
	}
	for _, s := range servers {
		fmt.Fprintf(out, "mcp-gateway: preparing %s\n", s.Key)
		if err := prepare(ctx, s, p.Servers); err != nil {
			return err
		}
	}
	return spawn(ctx, self, addr, p)
}

// prepare clones s's repository (kept when a template already holds it)
// and runs its installCmd there.
func prepare(ctx context.Context, s apimcp.Server, root string) error {
	dir := filepath.Join(root, s.Owner, s.Repo)
	if _, err := os.Stat(filepath.Join(dir, ".git")); os.IsNotExist(err) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return err
		}
		clone := exec.CommandContext(ctx, "git", "clone", "--depth", "1", "--quiet", s.CloneURL(), dir)
		if b, err := clone.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: git clone %s: %v: %s", s.Key, s.CloneURL(), err, strings.TrimSpace(string(b)))
		}
	}
	if s.InstallCmd == "" {
		return nil
	}
	install := exec.CommandContext(ctx, "/bin/sh", "-c", s.InstallCmd)
	install.Dir, install.Env = dir, withEnvs(os.Environ(), s.Envs)
	if b, err := install.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: installCmd %q: %v: %s", s.Key, s.InstallCmd, err, tail(b))
	}
	return nil
}

// spawn starts `self serve` in a session of its own (it outlives this
// command, which the SDK waits for), its output to the log, and waits
// for its first line on a pipe: "ready" or why it failed.
func spawn(ctx context.Context, self, addr string, p Paths) error {
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open the gateway's log: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(self, serveArgs(addr, p, 3)...)
	// The token reaches the daemon in its root-only file, never in the
	// environment its servers (anyone's code) inherit.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, apimcp.TokenEnv+"=") })
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = logf, logf, []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("start the gateway: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reaped if it ends while we wait
	if err := os.WriteFile(p.PIDFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("write %s: %w", p.PIDFile, err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		if s == "ready" {
			return nil
		}
		if s == "" {
			s = "it exited (" + p.Log + " says why)"
		}
		return fmt.Errorf("the gateway did not start: %s", s)
	case <-time.After(readyTimeout):
		_ = cmd.Process.Kill()
		return fmt.Errorf("the gateway did not start in %v (%s says why)", readyTimeout, p.Log)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return ctx.Err()
	}
}

func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (is a gateway running already?): %w", addr, err)
	}
	return ln, nil
}

func portFree(addr string) error {
	ln, err := listen(addr)
	if err == nil {
		ln.Close()
	}
	return err
}

// writePrivate writes a root-only file in a root-only directory.
func writePrivate(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// tail is the end of a command's output, for an error message.
func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

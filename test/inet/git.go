package inet

import (
	"embed"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sandlot-dev/sandlot/shim/podnet"
)

// The git host serves, over git's smart HTTP protocol on port 80 (git
// http-backend, as GitHub speaks it: shallow clones need it), the
// repository GitRepo: a stdio MCP server (testdata/mcp-tools) that a
// sandbox's mcp-gateway clones as github.com/<GitRepo> when git's
// url.<GitBase>.insteadOf says so (GitRedirect).
const (
	IPGit   = "198.51.100.50"
	GitRepo = "acme/mcp-tools"
	GitBase = "http://" + IPGit + "/"
)

// GitRedirect is the environment that makes git fetch github.com from
// the git host (GIT_CONFIG_* entries, as NAME=VALUE).
func GitRedirect() []string {
	return []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=url." + GitBase + ".insteadOf",
		"GIT_CONFIG_VALUE_0=https://github.com/"}
}

//go:embed testdata/mcp-tools
var mcpTools embed.FS

func (x *Internet) serveGit() error {
	root, err := os.MkdirTemp("", x.netns()+"-git-")
	if err != nil {
		return err
	}
	x.closers = append(x.closers, func() error { return os.RemoveAll(root) })
	if err := gitRepo(root); err != nil {
		return err
	}
	var l net.Listener
	if err := podnet.Run(x.NsPath(), func() (err error) {
		l, err = x.listen(net.JoinHostPort(IPGit, "80"))
		return err
	}); err != nil {
		return err
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return fmt.Errorf("git not found: install git (the git host runs git http-backend)")
	}
	backend := &cgi.Handler{Path: git, Args: []string{"http-backend"}, Dir: root,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: backend}
	go func() { _ = srv.Serve(l) }()
	x.closers = append(x.closers, srv.Close)
	return nil
}

// gitRepo makes root/GitRepo: a bare repository of testdata/mcp-tools.
func gitRepo(root string) error {
	work := filepath.Join(root, ".work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	b, err := mcpTools.ReadFile("testdata/mcp-tools/server.py")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "server.py"), b, 0o755); err != nil {
		return err
	}
	bare := filepath.Join(root, GitRepo)
	for _, args := range [][]string{
		{"-C", work, "init", "-q", "-b", "main"}, {"-C", work, "add", "server.py"},
		{"-C", work, "commit", "-q", "-m", "an MCP server"},
		{"clone", "-q", "--bare", work, bare},
	} {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=sandlot", "GIT_AUTHOR_EMAIL=test@sandlot.dev",
			"GIT_COMMITTER_NAME=sandlot", "GIT_COMMITTER_EMAIL=test@sandlot.dev")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s (install git)", args, err, out)
		}
	}
	return os.RemoveAll(work)
}

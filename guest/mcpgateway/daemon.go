package mcpgateway

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	apimcp "github.com/sandlot-dev/sandlot/api/mcp"
)

// serveArgs are the arguments of `mcp-gateway serve` as spawn passes
// them (ServeCommand reads them): the daemon's address, its paths and
// the descriptor it says ready on.
func serveArgs(addr string, p Paths, readyFD int) []string {
	return []string{"serve", "--addr", addr, "--config-file", p.ConfigFile, "--token-file", p.TokenFile,
		"--servers", p.Servers, "--ready-fd", strconv.Itoa(readyFD)}
}

// ServeCommand is `mcp-gateway serve ARGS` (ARGS without "serve"): the
// daemon Start spawns.
func ServeCommand(ctx context.Context, args []string) error {
	p := DefaultPaths
	fs := flag.NewFlagSet("mcp-gateway serve", flag.ContinueOnError)
	addr := fs.String("addr", fmt.Sprintf(":%d", apimcp.Port), "the address to serve on")
	fs.StringVar(&p.ConfigFile, "config-file", p.ConfigFile, "the configuration")
	fs.StringVar(&p.TokenFile, "token-file", p.TokenFile, "the access token")
	fs.StringVar(&p.Servers, "servers", p.Servers, "the servers' clones")
	readyFD := fs.Int("ready-fd", -1, "a descriptor to say ready (or why not) on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *readyFD < 0 {
		return Daemon(ctx, *addr, p, nil)
	}
	return Daemon(ctx, *addr, p, os.NewFile(uintptr(*readyFD), "ready"))
}

// Daemon is `mcp-gateway serve`: it starts the configured servers,
// listens on addr, says "ready" on ready (or why not) and serves.
func Daemon(ctx context.Context, addr string, p Paths, ready io.WriteCloser) error {
	err := daemon(ctx, addr, p, ready)
	if err != nil && ready != nil {
		fmt.Fprintf(ready, "%s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		ready.Close()
	}
	return err
}

func daemon(ctx context.Context, addr string, p Paths, ready io.WriteCloser) error {
	raw, err := os.ReadFile(p.ConfigFile)
	if err != nil {
		return err
	}
	token, err := os.ReadFile(p.TokenFile)
	if err != nil {
		return err
	}
	servers, err := apimcp.Parse(raw)
	if err != nil {
		return err
	}
	// The port first: a second gateway says so before starting servers.
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	var backends []*Backend
	for _, s := range servers {
		b, err := Connect(ctx, s, filepath.Join(p.Servers, s.Owner, s.Repo), os.Stderr)
		if err != nil {
			return err
		}
		backends = append(backends, b)
	}
	srv, err := NewServer(backends)
	if err != nil {
		return err
	}
	if ready != nil {
		fmt.Fprintln(ready, "ready")
		ready.Close()
	}
	return Serve(ctx, ln, Handler(srv, strings.TrimSpace(string(token))), backends)
}

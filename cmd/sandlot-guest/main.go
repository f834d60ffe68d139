// Command sandlot-guest is the in-VM agent: the envd-compatible API on
// :49983, the code interpreter on :49999 and the host's control channel.
// As PID 1 of a sandbox VM it first sets the system up (mounts, modules,
// the overlay root) from the kernel command line; run as an ordinary
// process (tests, benchmarks) it serves a directory as the sandbox's "/".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/control/server"
	"github.com/sandlot-dev/sandlot/guest/envd"
	"github.com/sandlot-dev/sandlot/guest/envd/files"
	"github.com/sandlot-dev/sandlot/guest/envd/filesystem"
	"github.com/sandlot-dev/sandlot/guest/envd/process"
	"github.com/sandlot-dev/sandlot/guest/guestlog"
	"github.com/sandlot-dev/sandlot/guest/httpserve"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/interpreter"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
	"github.com/sandlot-dev/sandlot/internal/version"
)

// autoUser picks the default user from the sandbox's own accounts.
const autoUser = "auto"

// defaultUserOf is who requests act as in root when they name no one: as
// on E2B, "user" (home /home/user, sudo in the images sandlot builds) when
// the image has that account; root in an image that has none.
func defaultUserOf(root sandboxfs.Root) string {
	if _, err := root.LookupUser("user"); err == nil {
		return "user"
	}
	return "root"
}

type options struct {
	root, envdAddr, interpAddr, control, defaultUser string
	maxUpload                                        int64
	applyHost                                        bool
}

func main() {
	if version.Requested(os.Args[1:]) {
		version.Print(os.Stdout, "sandlot-guest")
		return
	}
	if os.Getpid() == 1 {
		err := runInit()
		// Returning from PID 1 panics the kernel: say why on the console first.
		fmt.Fprintln(os.Stderr, "sandlot-guest: init:", err)
		os.Exit(1)
	}
	opts := options{}
	flag.StringVar(&opts.root, "root", "/", "directory that is the sandbox's \"/\" (processes are chrooted there unless it is /)")
	flag.StringVar(&opts.envdAddr, "envd-addr", ":49983", "address of the envd-compatible API")
	flag.StringVar(&opts.interpAddr, "interpreter-addr", ":49999", "address of the code interpreter (empty disables it)")
	flag.StringVar(&opts.control, "control", "", "control channel: a virtio-serial port, or a unix socket path to listen on (empty: none)")
	flag.BoolVar(&opts.applyHost, "apply-host", false, "let the control channel change this machine's hostname, network and clock (in the VM)")
	flag.StringVar(&opts.defaultUser, "default-user", autoUser, `user requests act as when they name none ("auto": E2B's "user" when the root's /etc/passwd has it, else root)`)
	flag.Int64Var(&opts.maxUpload, "max-upload", 0, "largest /files upload in bytes (0: limited by disk only)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "sandlot-guest:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts options) error {
	if opts.applyHost {
		// In the VM: the agent's log goes to the container's log too.
		slog.SetDefault(guestlog.New(os.Stderr, control.LogFIFO))
	}
	root, err := sandboxfs.New(opts.root)
	if err != nil {
		return err
	}
	if opts.defaultUser == autoUser {
		opts.defaultUser = defaultUserOf(root)
	}
	ids := &identity.Store{}
	proc := process.New(process.Config{Root: root, Identity: ids, DefaultUser: opts.defaultUser, Chroot: root.Dir != "/"})
	defer proc.Close()
	fs := filesystem.New(filesystem.Config{Root: root, DefaultUser: opts.defaultUser})
	defer fs.Close()
	api := envd.NewHandler(envd.Config{
		Root: root, Identity: ids, DefaultUser: opts.defaultUser, Process: proc, Filesystem: fs,
		Files: files.New(files.Config{Root: root, DefaultUser: opts.defaultUser, Identity: ids, MaxUpload: opts.maxUpload}),
	})
	if opts.control != "" {
		path, err := resolveControl("/sys", opts.control)
		if err != nil {
			return err
		}
		ctl := server.NewHandler(ids, server.Options{ApplyHost: opts.applyHost})
		defer ctl.Close()
		go func() {
			if err := server.Serve(ctx, path, ctl); err != nil && ctx.Err() == nil {
				slog.Error("control channel stopped", "path", path, "err", err)
			}
		}()
	}
	servers := []*http.Server{httpserve.New(opts.envdAddr, api)}
	if opts.interpAddr != "" {
		interp, err := startInterpreter(root, ids)
		if err != nil {
			slog.Warn("code interpreter disabled", "err", err)
		} else {
			defer interp.Close()
			servers = append(servers, httpserve.New(opts.interpAddr, envd.RequireToken(ids, interp.Handler())))
		}
	}
	return serve(ctx, servers)
}

func startInterpreter(root sandboxfs.Root, ids *identity.Store) (*interpreter.Server, error) {
	cwd, err := root.Resolve("/home/user", "/")
	if err != nil || !isDir(cwd) {
		cwd = root.Dir
	}
	return interpreter.New(interpreter.Config{Cwd: cwd, Env: ids.Env})
}

// serve runs the HTTP servers until ctx ends, then shuts them down.
func serve(ctx context.Context, servers []*http.Server) error {
	errs := make(chan error, len(servers))
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", s.Addr, err)
		}
		slog.Info("serving", "addr", s.Addr)
		go func() { errs <- s.Serve(ln) }()
	}
	select {
	case <-ctx.Done():
	case err := <-errs:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdown)
	}
	return nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

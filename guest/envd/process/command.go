package process

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// defaultPath is the PATH a process gets unless the sandbox or the request
// sets one (the agent's own PATH, as PID 1, may be empty).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// command builds the exec.Cmd a StartRequest asks for: as the request's
// user, with its environment and working directory. It does not start it.
func (s *Service) command(ctx context.Context, req *processpb.StartRequest) (*exec.Cmd, error) {
	cfg := req.GetProcess()
	if cfg.GetCmd() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	u, err := s.user(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := s.workdir(cfg.GetCwd(), u)
	if err != nil {
		return nil, err
	}
	env := s.environ(u, cfg.GetEnvs(), req.GetPty() != nil)
	attr := &syscall.SysProcAttr{}
	inside := ""
	if s.cfg.Chroot {
		attr.Chroot, inside, dir = s.cfg.Root.Dir, s.cfg.Root.Dir, s.cfg.Root.SandboxPath(dir)
	}
	path, err := lookPath(cfg.GetCmd(), env["PATH"], inside)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start %s: %w", cfg.GetCmd(), err))
	}
	if attr.Credential, err = s.credential(u); err != nil {
		return nil, err
	}
	return &exec.Cmd{
		Path:        path,
		Args:        append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		Env:         flatten(env),
		Dir:         dir,
		SysProcAttr: attr,
	}, nil
}

// user is the user the request acts as (set by the envd server from
// `Authorization: Basic`), else the configured default.
func (s *Service) user(ctx context.Context) (sandboxfs.User, error) {
	if u, ok := sandboxfs.UserFrom(ctx); ok {
		return u, nil
	}
	u, err := s.cfg.Root.LookupUser(s.cfg.DefaultUser)
	if err != nil {
		return sandboxfs.User{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("default user: %w", err))
	}
	return u, nil
}

// workdir resolves the requested cwd (relative to the user's home) to a
// host directory. Without one the process starts in the home directory,
// or in "/" when the home does not exist (e.g. nobody's /nonexistent).
func (s *Service) workdir(cwd string, u sandboxfs.User) (string, error) {
	home := cmp.Or(u.Home, "/")
	if cwd == "" {
		if dir, err := s.cfg.Root.Resolve(home, "/"); err == nil && isDir(dir) == nil {
			return dir, nil
		}
		return s.cfg.Root.Resolve("/", "/")
	}
	dir, err := s.cfg.Root.Resolve(cwd, home)
	if err == nil {
		err = isDir(dir)
	}
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %q: %w", cwd, err))
	}
	return dir, nil
}

func isDir(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	return nil
}

// environ layers the environment: login defaults, then the sandbox's
// variables (pushed by the host), then the request's own.
func (s *Service) environ(u sandboxfs.User, req map[string]string, tty bool) map[string]string {
	env := map[string]string{
		"PATH":    defaultPath,
		"HOME":    cmp.Or(u.Home, "/"),
		"USER":    u.Name,
		"LOGNAME": u.Name,
	}
	if tty {
		env["TERM"] = "xterm-256color"
	}
	if s.cfg.Identity != nil {
		if s.cfg.Identity.Get().EgressCA != "" {
			maps.Copy(env, identity.EgressCAEnv())
		}
		for k, v := range s.cfg.Identity.Env() {
			env[k] = v
		}
	}
	for k, v := range req {
		env[k] = v
	}
	return env
}

func flatten(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		if k != "" && !strings.ContainsAny(k, "=\x00") && !strings.ContainsRune(v, 0) {
			out = append(out, k+"="+v)
		}
	}
	slices.Sort(out)
	return out
}

// lookPath finds cmd in the process's PATH (exec.LookPath would search the
// agent's own), looking under root when the process will be chrooted
// there. A cmd with a slash is used as is; a relative one is then taken
// from the working directory by exec.
func lookPath(cmd, path, root string) (string, error) {
	if strings.ContainsRune(cmd, 0) {
		return "", errors.New("command contains a NUL byte")
	}
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, cmd)
		if fi, err := os.Stat(filepath.Join(root, p)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable file not found in PATH %q", path)
}

// credential switches to u unless the agent already runs as u; only root
// can switch.
func (s *Service) credential(u sandboxfs.User) (*syscall.Credential, error) {
	self := os.Geteuid()
	if int64(u.UID) == int64(self) {
		return nil, nil
	}
	if self != 0 {
		return nil, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("cannot run as user %q (uid %d): the agent runs as uid %d, not root", u.Name, u.UID, self))
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: s.groups(u)}, nil
}

// groups returns u's supplementary groups from the sandbox's /etc/group,
// so e.g. membership of "sudo" or "docker" carries over.
func (s *Service) groups(u sandboxfs.User) []uint32 {
	f, err := os.Open(filepath.Join(s.cfg.Root.Dir, "etc", "group"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var gids []uint32
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 4 || !slices.Contains(strings.Split(fields[3], ","), u.Name) {
			continue
		}
		if gid, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
			gids = append(gids, uint32(gid))
		}
	}
	return gids
}

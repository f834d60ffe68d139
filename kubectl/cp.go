package kubectl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// cp is tar through exec, as kubectl cp: the plugin already execs into
// the sandbox's pod through the API server (exec.go), which reaches the
// VM from anywhere the kubeconfig works. envd's files API would need the
// sandbox's access token and a route to the pod IP, which the plugin has
// neither of.
func (r *root) cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories into or out of a sandbox (SANDBOX:PATH, as in kubectl cp)",
		Long: "cp copies a file or a directory tree between the local machine and SANDBOX:PATH in the sandbox's\n" +
			"VM, either way, as kubectl cp does: a tar stream through exec into the pod that holds the sandbox\n" +
			"now (the sandbox's image needs tar). A destination that is a directory, or ends in /, gets the\n" +
			"source inside it under its own name; otherwise the source is copied to that path.\n" +
			"Files copied in belong to root. Out of a sandbox only regular files and directories come, and\n" +
			"only under the destination: links and special files are skipped (and said on stderr).\n" +
			"A local path with a ':' in its first element reads as SANDBOX:PATH: write ./a:b.",
		Example: "  kubectl sandlot cp ./data.csv my-sandbox:/home/user/data.csv\n" +
			"  kubectl sandlot cp ./src my-sandbox:/tmp/\n" +
			"  kubectl sandlot cp my-sandbox:/home/user/results ./results",
		Args:              args(2, 2, "SRC and DST, one of them SANDBOX:PATH"),
		ValidArgsFunction: r.completeCp,
		RunE:              func(cmd *cobra.Command, args []string) error { return r.cp(cmd, args[0], args[1]) },
	}
}

// cpEnd is one side of cp: a local path, or a path in a sandbox.
type cpEnd struct{ sandbox, path string }

// parseCpArg reads SANDBOX:PATH; anything else (no ':', or a '/' before
// the first one) is local.
func parseCpArg(arg string) cpEnd {
	i := strings.Index(arg, ":")
	if i <= 0 || strings.ContainsAny(arg[:i], `/\`) {
		return cpEnd{path: arg}
	}
	return cpEnd{sandbox: arg[:i], path: arg[i+1:]}
}

// cpEnds checks that exactly one side is in a sandbox, with a path.
func cpEnds(cmd *cobra.Command, src, dst string) (from, to cpEnd, err error) {
	from, to = parseCpArg(src), parseCpArg(dst)
	switch {
	case from.sandbox != "" && to.sandbox != "":
		return from, to, errUsage(cmd, "cp copies between this machine and a sandbox: both %s and %s name a sandbox", src, dst)
	case from.sandbox == "" && to.sandbox == "":
		return from, to, errUsage(cmd, "cp needs SANDBOX:PATH as SRC or DST, got two local paths: %s %s", src, dst)
	case from.path == "" || to.path == "":
		return from, to, errUsage(cmd, "cp: an empty path in %s %s (write SANDBOX:/path)", src, dst)
	}
	return from, to, nil
}

func (r *root) cp(cmd *cobra.Command, src, dst string) error {
	from, to, err := cpEnds(cmd, src, dst)
	if err != nil {
		return err
	}
	s, err := r.session()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	pod, err := s.sandboxPod(ctx, from.sandbox+to.sandbox, "copy files through")
	if err != nil {
		return err
	}
	if from.sandbox != "" {
		return s.copyFrom(ctx, s.tarPlan(pod, false), from.path, to.path)
	}
	if _, err := os.Lstat(from.path); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	dest := to.path
	if strings.HasSuffix(dest, "/") || s.isDir(ctx, pod, dest) {
		dest = path.Join(dest, filepath.Base(from.path))
	}
	return s.copyTo(ctx, s.tarPlan(pod, true), from.path, dest)
}

// tarPlan is an exec in pod for tar, its command set by the caller.
func (s *session) tarPlan(pod string, stdin bool) *execPlan {
	return &execPlan{ns: s.ns, pod: pod, opts: corev1.PodExecOptions{Container: sandlotv1.ContainerName,
		Stdin: stdin, Stdout: true, Stderr: true}}
}

// isDir reports whether p is a directory in the sandbox (test -d).
func (s *session) isDir(ctx context.Context, pod, p string) bool {
	plan := s.tarPlan(pod, false)
	plan.opts.Command = []string{"test", "-d", p}
	return s.execStreams(ctx, plan, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}) == nil
}

// copyTo packs local into the sandbox as dest: tar -x in dest's
// directory reads the stream writeTar makes, its entries named dest's
// base name.
func (s *session) copyTo(ctx context.Context, plan *execPlan, local, dest string) error {
	plan.opts.Command = []string{"tar", "-xmf", "-", "-C", path.Dir(dest)}
	pr, pw := io.Pipe()
	packed := make(chan error, 1)
	go func() {
		err := writeTar(pw, local, path.Base(dest), s.errOut)
		pw.CloseWithError(err)
		packed <- err
	}()
	stderr := &tailBuffer{}
	err := s.execStreams(ctx, plan, remotecommand.StreamOptions{Stdin: pr, Stdout: stderr, Stderr: stderr})
	pr.Close() // a tar that ended early stops writeTar
	if perr := <-packed; perr != nil && !errors.Is(perr, io.ErrClosedPipe) {
		return fmt.Errorf("cp: read %s: %w", local, perr)
	}
	if err != nil {
		return tarFailed("copy "+local+" into the sandbox as "+dest, err, stderr.String())
	}
	return nil
}

// copyFrom unpacks what tar -c of remote sends into local (inside it,
// when local is a directory).
func (s *session) copyFrom(ctx context.Context, plan *execPlan, remote, local string) error {
	remote = path.Clean(remote)
	dir, base := path.Dir(remote), path.Base(remote)
	if remote == "/" {
		base = "." // the whole tree, its contents into local
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() && base != "." {
		local = filepath.Join(local, base)
	}
	plan.opts.Command = []string{"tar", "-cf", "-", "-C", dir, base}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	stderr := &tailBuffer{}
	ran := make(chan error, 1)
	go func() {
		err := s.execStreams(ctx, plan, remotecommand.StreamOptions{Stdout: pw, Stderr: stderr})
		pw.CloseWithError(err)
		ran <- err
	}()
	_, uerr := untar(pr, base, local, s.errOut)
	if uerr == nil {
		_, _ = io.Copy(io.Discard, pr) // tar pads its output: let it finish
	} else {
		pr.CloseWithError(uerr)
		cancel()
	}
	eerr := <-ran
	if eerr != nil && (uerr == nil || errors.Is(uerr, eerr)) {
		return tarFailed("copy "+remote+" out of the sandbox", eerr, stderr.String())
	}
	if uerr != nil {
		return fmt.Errorf("cp: %w", uerr)
	}
	return nil
}

// tarFailed says why the sandbox's tar failed: its exit code and the
// end of its stderr.
func tarFailed(what string, err error, stderr string) error {
	var exit *ExitError
	if !errors.As(err, &exit) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if exit.Code == 126 || exit.Code == 127 {
		return fmt.Errorf("%s: tar did not run in the sandbox (exit code %d; cp needs tar in the sandbox's image): %s",
			what, exit.Code, stderr)
	}
	return fmt.Errorf("%s: tar exited with code %d: %s", what, exit.Code, stderr)
}

package kubectl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

type execOptions struct {
	stdin, tty bool
}

func (r *root) execCmd() *cobra.Command {
	o := &execOptions{}
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [-i] [-t] -- COMMAND [ARGS...]",
		Short: "Run a command in a sandbox (through its pod's exec API); its exit code is the plugin's",
		Example: "  kubectl sandlot exec my-sandbox -- python3 -c 'print(1)'\n" +
			"  kubectl sandlot exec my-sandbox -it -- bash",
		Args: func(cmd *cobra.Command, args []string) error {
			_, _, err := execArgs(cmd, args)
			return err
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveDefault // the command's own arguments
			}
			return r.completeSandboxes(cmd, args, prefix)
		},
		RunE: func(cmd *cobra.Command, args []string) error { return r.exec(cmd, o, args) },
	}
	cmd.Flags().BoolVarP(&o.stdin, "stdin", "i", false, "pass stdin to the command")
	cmd.Flags().BoolVarP(&o.tty, "tty", "t", false, "stdin is a TTY (with -i, when stdin is a terminal)")
	return cmd
}

// execArgs splits `SANDBOX -- COMMAND [ARGS...]`.
func execArgs(cmd *cobra.Command, args []string) (string, []string, error) {
	dash := cmd.ArgsLenAtDash()
	switch {
	case len(args) == 0 || dash == 0:
		return "", nil, errUsage(cmd, "exec expects SANDBOX -- COMMAND [ARGS...]: no sandbox given")
	case dash < 0 && len(args) > 1:
		return "", nil, errUsage(cmd, "put the command after --: kubectl sandlot exec %s -- %s", args[0], strings.Join(args[1:], " "))
	case dash > 1:
		return "", nil, errUsage(cmd, "exec takes one SANDBOX before --, got %d: %s", dash, strings.Join(args[:dash], " "))
	case dash < 0 || dash == len(args):
		return "", nil, errUsage(cmd, "exec expects SANDBOX -- COMMAND [ARGS...]: no command given after --")
	}
	return args[0], args[dash:], nil
}

func (r *root) exec(cmd *cobra.Command, o *execOptions, args []string) error {
	name, command, err := execArgs(cmd, args)
	if err != nil {
		return err
	}
	s, err := r.session()
	if err != nil {
		return err
	}
	sbx, err := s.sandbox(cmd.Context(), name)
	if err != nil {
		return err
	}
	plan, err := planExec(sbx, command, o, r.streams.In, r.streams.ErrOut)
	if err != nil {
		return err
	}
	return s.stream(cmd.Context(), plan, r.streams.In)
}

// execPlan is one exec: the pod, what its exec API is asked for, and
// whether the local terminal goes raw.
type execPlan struct {
	ns, pod string
	opts    corev1.PodExecOptions
}

// planExec checks the sandbox has a pod to exec into and settles the
// streams: -t needs -i and a terminal on stdin, as in kubectl exec (it
// says so on stderr and runs without a TTY otherwise).
func planExec(sbx *sandlotv1.Sandbox, command []string, o *execOptions, in io.Reader, errOut io.Writer) (*execPlan, error) {
	pod, err := podOf(sbx, "exec into")
	if err != nil {
		return nil, err
	}
	tty := o.tty
	switch {
	case tty && !o.stdin:
		fmt.Fprintln(errOut, "Unable to use a TTY without -i: running without one")
		tty = false
	case tty && !isTerminal(in):
		fmt.Fprintln(errOut, "Unable to use a TTY - input is not a terminal or the right kind of file")
		tty = false
	}
	return &execPlan{ns: sbx.Namespace, pod: pod, opts: corev1.PodExecOptions{
		Container: sandlotv1.ContainerName, Command: command,
		Stdin: o.stdin, Stdout: true, Stderr: !tty, TTY: tty, // a TTY merges stderr into stdout
	}}, nil
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// url is the pod's exec subresource with the plan's options.
func (p *execPlan) url(c rest.Interface) *url.URL {
	return c.Post().Resource("pods").Namespace(p.ns).Name(p.pod).SubResource("exec").
		VersionedParams(&p.opts, runtime.NewParameterCodec(scheme)).URL()
}

// stream runs the plan on the plugin's streams, in a raw local terminal
// with -t.
func (s *session) stream(ctx context.Context, p *execPlan, in io.Reader) error {
	opts := remotecommand.StreamOptions{Stdout: s.out, Tty: p.opts.TTY}
	if p.opts.Stdin {
		opts.Stdin = in
	}
	if !p.opts.TTY {
		opts.Stderr = s.errOut
	}
	if p.opts.TTY {
		restore, queue, err := rawTerminal(in.(*os.File), s.out)
		if err != nil {
			return err
		}
		defer restore()
		opts.TerminalSizeQueue = queue
	}
	return s.execStreams(ctx, p, opts)
}

// execStreams runs the plan with opts' streams: over WebSockets, falling
// back to SPDY for API servers without them (as kubectl does). A
// non-zero exit becomes an *ExitError carrying the code.
func (s *session) execStreams(ctx context.Context, p *execPlan, opts remotecommand.StreamOptions) error {
	core, err := s.core()
	if err != nil {
		return err
	}
	exec, err := executor(s.cfg, p.url(core.RESTClient()))
	if err != nil {
		return err
	}
	return streamError(exec.StreamWithContext(ctx, opts), p.pod)
}

// streamError maps the remote command's exit status onto *ExitError (the
// plugin exits with it); other errors are the stream's own.
func streamError(err error, pod string) error {
	var exit utilexec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		return &ExitError{Code: exit.ExitStatus()}
	}
	if err != nil {
		return fmt.Errorf("exec in pod %s of the sandbox: %w", pod, err)
	}
	return nil
}

func executor(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		return nil, fmt.Errorf("set up exec over SPDY: %w", err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		return nil, fmt.Errorf("set up exec over WebSockets: %w", err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, upgradeRefused)
	if err != nil {
		return nil, fmt.Errorf("set up exec: %w", err)
	}
	return exec, nil
}

// upgradeRefused says a WebSocket upgrade failed in a way SPDY may not
// (an API server or proxy without WebSockets): fall back, as kubectl does.
func upgradeRefused(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// rawTerminal puts the local terminal in raw mode (restore undoes it)
// and reports its size now and on every resize.
func rawTerminal(in *os.File, out io.Writer) (func(), remotecommand.TerminalSizeQueue, error) {
	state, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return nil, nil, fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	fd := int(in.Fd())
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd = int(f.Fd())
	}
	q := newSizeQueue(fd)
	return func() { q.stop(); _ = term.Restore(int(in.Fd()), state) }, q, nil
}

// sizeQueue tells the remote TTY the terminal's size: first at once,
// then on each resize signal.
type sizeQueue struct {
	fd      int
	resize  chan os.Signal
	done    chan struct{}
	started bool
}

func newSizeQueue(fd int) *sizeQueue {
	q := &sizeQueue{fd: fd, resize: make(chan os.Signal, 1), done: make(chan struct{})}
	notifyResize(q.resize)
	return q
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	if q.started {
		select {
		case <-q.resize:
		case <-q.done:
			return nil
		}
	}
	q.started = true
	w, h, err := term.GetSize(q.fd)
	if err != nil {
		return nil
	}
	return &remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}
}

func (q *sizeQueue) stop() {
	stopResize(q.resize)
	close(q.done)
}

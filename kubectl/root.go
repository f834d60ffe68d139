// Package kubectl is the kubectl-sandlot plugin: `kubectl sandlot` lists,
// creates, snapshots, clones, pauses, resumes, rolls back, execs into and
// deletes sandboxes by writing sandlot's CRDs, and waits on their status
// through watches; it reads their logs, copies files and forwards ports
// through the pod that holds each sandbox now (its status.podName).
package kubectl

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// scheme knows the kinds the plugin reads and writes (and PodExecOptions;
// Deployments: version reads the controller's).
var scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, sandlotv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("build scheme: %v", err))
		}
	}
	return s
}

// ExitError carries the exit code of a command run by `exec`: the
// plugin exits with it and prints nothing more.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("command exited with code %d", e.Code) }

// root holds what every subcommand shares: the kubeconfig flags and the
// streams.
type root struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
}

// NewRootCommand is `kubectl sandlot` with all its subcommands. Errors are
// returned by Execute, not printed (the caller prints them once).
func NewRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	r := &root{flags: genericclioptions.NewConfigFlags(true), streams: streams}
	cmd := &cobra.Command{
		Use:   "kubectl-sandlot",
		Short: "Work with sandlot sandboxes: snapshot, clone, pause, resume, rollback, exec, logs, cp, port-forward",
		Long: "kubectl sandlot manages sandlot sandboxes (QEMU microVMs in pods) through their\n" +
			"Kubernetes objects: Sandbox, Snapshot, PausedSandbox and Template.\n" +
			"--wait follows the status through a watch and reports progress on stderr; --timeout bounds it.\n" +
			"-o json|yaml|name|wide prints the objects a command lists, makes or changes, as kubectl get -o.\n" +
			"exec, logs, cp and port-forward reach the pod the sandbox's status names.\n\n" +
			"Shell completion: `kubectl sandlot completion bash|zsh|fish` completes the kubectl-sandlot\n" +
			"binary; for `kubectl sandlot <TAB>`, link kubectl-sandlot as kubectl_complete-sandlot on PATH.",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl sandlot"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	r.flags.AddFlags(cmd.PersistentFlags())
	_ = cmd.RegisterFlagCompletionFunc("namespace", r.completeNamespaces)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nSee '%s --help' for usage", err, c.CommandPath())
	})
	cmd.AddCommand(r.lsCmd(), r.createCmd(), r.snapshotCmd(), r.cloneCmd(), r.pauseCmd(), r.resumeCmd(),
		r.rollbackCmd(), r.execCmd(), r.deleteCmd(), r.logsCmd(), r.cpCmd(), r.portForwardCmd(), r.drainCmd(), r.versionCmd())
	return cmd
}

// args checks the number of positional arguments (max < 0: no upper
// bound) and answers a wrong count with what is expected and the example.
func args(min, max int, expected string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, got []string) error {
		if len(got) >= min && (max < 0 || len(got) <= max) {
			return nil
		}
		return fmt.Errorf("%s expects %s, got %d argument(s)%s\nExample:\n%s",
			cmd.CommandPath(), expected, len(got), quoted(got), cmd.Example)
	}
}

// sandboxCmd fills in cmd (its Use, Short and Example set) as a command
// on exactly one SANDBOX argument, tab-completed from the cluster, that
// run acts on (see onSandbox).
func (r *root) sandboxCmd(cmd *cobra.Command, w waiter, run sandboxRun) *cobra.Command {
	cmd.Args = args(1, 1, "exactly one SANDBOX")
	cmd.ValidArgsFunction = r.completeSandboxes
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return r.onSandbox(cmd, w, args[0], run) }
	return cmd
}

func quoted(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return ": " + strings.Join(args, " ")
}

// errUsage is a bad flag value or combination, said with an example.
func errUsage(cmd *cobra.Command, format string, a ...any) error {
	return fmt.Errorf("%s\nExample:\n%s", fmt.Sprintf(format, a...), cmd.Example)
}

package kubectl

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// podOf is the pod that holds the sandbox now: its status.podName. With
// warm pools and start slots that pod is not named after the sandbox,
// and a resume moves it to another, so it is never guessed from the
// name. verb says what the caller wanted the pod for.
func podOf(sbx *sandlotv1.Sandbox, verb string) (string, error) {
	if err := sandboxFailed(sbx); err != nil {
		return "", err
	}
	if sbx.Status.PodName == "" {
		hint := "it has not started yet"
		if sbx.Spec.Paused || sbx.Status.Phase == sandlotv1.SandboxPaused {
			hint = "it is paused: resume it first (kubectl sandlot resume " + sbx.Name + ")"
		}
		return "", fmt.Errorf("sandbox %s has no pod to %s (phase %s): %s", sbx.Name, verb, or(string(sbx.Status.Phase)), hint)
	}
	return sbx.Status.PodName, nil
}

// sandboxPod reads the named sandbox and returns its pod (see podOf).
func (s *session) sandboxPod(ctx context.Context, name, verb string) (string, error) {
	sbx, err := s.sandbox(ctx, name)
	if err != nil {
		return "", err
	}
	return podOf(sbx, verb)
}

type logsOptions struct {
	follow     bool
	tail       int64
	since      time.Duration
	timestamps bool
}

func (r *root) logsCmd() *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs SANDBOX [-f] [--tail N]",
		Short: "Print a sandbox's log (from the pod that holds it now)",
		Long: "logs prints the sandbox container's log: the output of its init process, the guest agent's\n" +
			"log and what any process in the VM writes to /run/sandlot/log. It reads the pod the\n" +
			"sandbox's status names (with warm pools and start slots that pod has another name).",
		Example: "  kubectl sandlot logs my-sandbox\n  kubectl sandlot logs my-sandbox -f --tail 20",
	}
	r.sandboxArg(cmd, func(cmd *cobra.Command, name string) error { return r.logs(cmd, o, name) })
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "stream the log until the pod goes or Ctrl-C")
	cmd.Flags().Int64Var(&o.tail, "tail", -1, "lines of the end of the log to show (-1: all)")
	cmd.Flags().DurationVar(&o.since, "since", 0, "only lines newer than this, e.g. 5m (0: all)")
	cmd.Flags().BoolVar(&o.timestamps, "timestamps", false, "prefix each line with its time (RFC3339)")
	return cmd
}

// sandboxArg fills in cmd as a command on exactly one SANDBOX, completed
// from the cluster, that run acts on (without --wait).
func (r *root) sandboxArg(cmd *cobra.Command, run func(cmd *cobra.Command, name string) error) {
	cmd.Args = args(1, 1, "exactly one SANDBOX")
	cmd.ValidArgsFunction = r.completeSandboxes
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return run(cmd, args[0]) }
}

// podLogOptions checks the flags and says them as the log API's options.
func (o *logsOptions) podLogOptions(cmd *cobra.Command) (*corev1.PodLogOptions, error) {
	opts := &corev1.PodLogOptions{Container: sandlotv1.ContainerName, Follow: o.follow, Timestamps: o.timestamps}
	switch {
	case o.tail < -1:
		return nil, errUsage(cmd, "--tail %d: want -1 (all) or more", o.tail)
	case o.tail >= 0:
		opts.TailLines = ptr.To(o.tail)
	}
	switch {
	case o.since < 0:
		return nil, errUsage(cmd, "--since %v: want a positive duration", o.since)
	case o.since > 0:
		opts.SinceSeconds = ptr.To(max(int64(o.since.Seconds()), 1))
	}
	return opts, nil
}

func (r *root) logs(cmd *cobra.Command, o *logsOptions, name string) error {
	opts, err := o.podLogOptions(cmd)
	if err != nil {
		return err
	}
	s, err := r.session()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	pod, err := s.sandboxPod(ctx, name, "read the log of")
	if err != nil {
		return err
	}
	core, err := s.core()
	if err != nil {
		return err
	}
	stream, err := core.Pods(s.ns).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return fmt.Errorf("log of pod %s of sandbox %s: %w", pod, name, err)
	}
	defer stream.Close()
	if _, err := io.Copy(s.out, stream); err != nil && ctx.Err() == nil {
		return fmt.Errorf("log of pod %s of sandbox %s: %w", pod, name, err)
	}
	return nil
}

package kubectl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func (r *root) pauseCmd() *cobra.Command {
	o := &changeFlags{}
	cmd := r.sandboxCmd(&cobra.Command{
		Use:     "pause SANDBOX",
		Short:   "Pause a sandbox: its VM state is kept in a PausedSandbox and its pod goes",
		Example: "  kubectl sandlot pause my-sandbox --wait",
	}, o, func(ctx context.Context, s *session, sbx *sandlotv1.Sandbox) error {
		return s.pause(ctx, o, sbx)
	})
	o.add(cmd, "the sandbox is Paused")
	return cmd
}

// pause asks for sbx to be paused and, with --wait, says where its
// state went once it is; -o prints the sandbox.
func (s *session) pause(ctx context.Context, o *changeFlags, sbx *sandlotv1.Sandbox) error {
	if err := s.setPaused(ctx, sbx, true); err != nil {
		return err
	}
	if o.wait {
		paused, err := s.waitPaused(ctx, &o.waitFlags, sbx.Name, sbx.Generation)
		if err != nil {
			return err
		}
		if err := s.printPaused(ctx, sbx.Name); err != nil {
			return err
		}
		sbx = paused
	}
	return o.out.emit(s.objects, sbx)
}

// setPaused sets spec.paused unless it is so already: asking twice is no
// error (the command says so, and --wait still waits).
func (s *session) setPaused(ctx context.Context, sbx *sandlotv1.Sandbox, paused bool) error {
	already, doing := "not paused", "resuming"
	if paused {
		already, doing = "already paused", "pausing"
	}
	if sbx.Spec.Paused == paused {
		fmt.Fprintf(s.out, "sandbox/%s is %s (phase %s)\n", sbx.Name, already, or(string(sbx.Status.Phase)))
		return nil
	}
	if err := s.patchSpec(ctx, sbx, map[string]any{"paused": paused}); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "sandbox/%s %s\n", sbx.Name, doing)
	return nil
}

// waitPaused waits until the sandbox is Paused and returns it; a pause
// the controller reports failed (for this generation) ends it with the
// reason.
func (s *session) waitPaused(ctx context.Context, w *waitFlags, name string, gen int64) (*sandlotv1.Sandbox, error) {
	var sbx *sandlotv1.Sandbox
	err := s.wait(ctx, w, "sandbox/"+name+" to be Paused", &sandlotv1.SandboxList{}, []string{name}, func(objs objects, p *progress) (bool, error) {
		o, ok := objs[name]
		if !ok {
			return false, fmt.Errorf("sandbox %s was deleted while pausing", name)
		}
		sbx = o.(*sandlotv1.Sandbox)
		p.show("sandbox/"+name, sandboxState(sbx))
		switch {
		case sandboxFailed(sbx) != nil:
			return false, sandboxFailed(sbx)
		case !sbx.Spec.Paused:
			return false, fmt.Errorf("sandbox %s was resumed (spec.paused false) while pausing", name)
		case sbx.Status.ObservedGeneration >= gen && sbx.Status.Reason == sandlotv1.ReasonPauseFailed:
			return false, fmt.Errorf("pause of sandbox %s failed: %s", name, sbx.Status.Message)
		}
		return sbx.Status.Phase == sandlotv1.SandboxPaused, nil
	})
	return sbx, err
}

// printPaused reports the PausedSandbox holding the paused state.
func (s *session) printPaused(ctx context.Context, name string) error {
	ps := &sandlotv1.PausedSandbox{}
	if err := s.get(ctx, "pausedsandbox", name, ps); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "sandbox/%s paused: %s\n", name, pausedNote(ps))
	return nil
}

// pausedNote says where a paused state is and whether other nodes may
// resume it (remoteStatus).
func pausedNote(ps *sandlotv1.PausedSandbox) string {
	return fmt.Sprintf("pausedsandbox/%s on %s, %s", ps.Name, ps.Status.NodeName, remoteNote(&ps.Status.DataStatus))
}

func (r *root) resumeCmd() *cobra.Command {
	o := &changeFlags{}
	cmd := r.sandboxCmd(&cobra.Command{
		Use:     "resume SANDBOX",
		Short:   "Resume a paused sandbox (same ID; on another node when its remoteStatus is Ready)",
		Example: "  kubectl sandlot resume my-sandbox --wait",
	}, o, func(ctx context.Context, s *session, sbx *sandlotv1.Sandbox) error {
		return s.resume(ctx, o, sbx)
	})
	o.add(cmd, "the sandbox is usable (Running, VMReady)")
	return cmd
}

// resume asks for sbx to run again, saying first where a paused one
// resumes from (its PausedSandbox, when there is one to read); -o
// prints the sandbox.
func (s *session) resume(ctx context.Context, o *changeFlags, sbx *sandlotv1.Sandbox) error {
	ps := &sandlotv1.PausedSandbox{}
	if sbx.Spec.Paused && s.c.Get(ctx, client.ObjectKeyFromObject(sbx), ps) == nil {
		fmt.Fprintf(s.out, "resuming sandbox/%s from %s\n", sbx.Name, pausedNote(ps))
	}
	if err := s.setPaused(ctx, sbx, false); err != nil {
		return err
	}
	if o.wait {
		usable, err := s.waitUsable(ctx, &o.waitFlags, map[string]int64{sbx.Name: sbx.Generation})
		if err != nil {
			return err
		}
		sbx = usable[0]
	}
	return o.out.emit(s.objects, sbx)
}

type rollbackOptions struct {
	to string
	changeFlags
}

// check wants --to first: without it there is nothing to do.
func (o *rollbackOptions) check(cmd *cobra.Command) error {
	if o.to == "" {
		return errUsage(cmd, "--to is required: the snapshot to roll back to")
	}
	return o.changeFlags.check(cmd)
}

func (r *root) rollbackCmd() *cobra.Command {
	o := &rollbackOptions{}
	cmd := r.sandboxCmd(&cobra.Command{
		Use:     "rollback SANDBOX --to SNAPSHOT",
		Short:   "Restore a running sandbox in place from one of its own snapshots (same ID, same node)",
		Example: "  kubectl sandlot rollback my-sandbox --to before-upgrade --wait",
	}, o, func(ctx context.Context, s *session, sbx *sandlotv1.Sandbox) error {
		return s.rollback(ctx, o, sbx)
	})
	cmd.Flags().StringVar(&o.to, "to", "", "the Snapshot to roll back to (required; one taken of this sandbox)")
	o.changeFlags.add(cmd, "the node agent has rolled the sandbox back")
	_ = cmd.RegisterFlagCompletionFunc("to", r.completeOwnSnapshots)
	return cmd
}

// rollback asks the node agent to restore sbx from snapshot o.to, under
// a fresh request ID by which the agent reports it done.
func (s *session) rollback(ctx context.Context, o *rollbackOptions, sbx *sandlotv1.Sandbox) error {
	if err := snapshottable(sbx); err != nil {
		return err
	}
	if _, err := s.snapshot(ctx, o.to); err != nil {
		return err
	}
	// Whether the snapshot is the sandbox's own is the node agent's
	// call: its refusal comes back through the RolledBack condition.
	requestID, err := newRequestID()
	if err != nil {
		return err
	}
	if err := s.patchSpec(ctx, sbx, map[string]any{"rollback": map[string]any{"snapshot": o.to, "requestID": requestID}}); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "sandbox/%s rollback to snapshot/%s requested (request %s)\n", sbx.Name, o.to, requestID)
	if o.wait {
		if sbx, err = s.waitRolledBack(ctx, &o.waitFlags, sbx, o.to, requestID); err != nil {
			return err
		}
	}
	return o.out.emit(s.objects, sbx)
}

func newRequestID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("draw a rollback request ID: %w", err)
	}
	return "kubectl-" + hex.EncodeToString(b), nil
}

// waitRolledBack waits until the agent records requestID as done and
// returns the sandbox; its refusal or failure (RolledBack False for this
// generation or later) ends the wait with the condition's message.
func (s *session) waitRolledBack(ctx context.Context, w *waitFlags, sbx *sandlotv1.Sandbox, to, requestID string) (*sandlotv1.Sandbox, error) {
	name, gen := sbx.Name, sbx.Generation
	err := s.wait(ctx, w, "sandbox/"+name+" to roll back", &sandlotv1.SandboxList{}, []string{name}, func(objs objects, p *progress) (bool, error) {
		o, ok := objs[name]
		if !ok {
			return false, fmt.Errorf("sandbox %s was deleted during the rollback", name)
		}
		sbx = o.(*sandlotv1.Sandbox)
		c := meta.FindStatusCondition(sbx.Status.Conditions, sandlotv1.ConditionRolledBack)
		state := sandboxState(sbx)
		if c != nil {
			state += fmt.Sprintf(", RolledBack %s (%s, generation %d)", c.Status, c.Reason, c.ObservedGeneration)
		}
		p.show("sandbox/"+name, state)
		switch {
		case sbx.Status.LastRollbackRequestID == requestID:
			fmt.Fprintf(s.out, "sandbox/%s rolled back to snapshot/%s%s\n", name, to, doneNote(c))
			return true, nil
		case c == nil || c.ObservedGeneration < gen:
			return false, nil
		case c.Reason == sandlotv1.ReasonRollbackRefused:
			return false, fmt.Errorf("rollback of sandbox %s refused: %s", name, c.Message)
		case c.Reason == sandlotv1.ReasonRollbackFailed:
			return false, fmt.Errorf("rollback of sandbox %s failed: %s", name, c.Message)
		}
		return false, nil
	})
	return sbx, err
}

// doneNote is the agent's message about a finished rollback.
func doneNote(c *metav1.Condition) string {
	if c == nil || c.Status != metav1.ConditionTrue || c.Message == "" {
		return ""
	}
	return ": " + c.Message
}

package kubectl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// deleteOptions: --wait, --timeout and -o name (as kubectl delete has:
// the name of each deleted sandbox, kind.group/name).
type deleteOptions struct {
	output string
	waitFlags
}

func (o *deleteOptions) check(cmd *cobra.Command) error {
	if o.output != "" && o.output != "name" {
		return errUsage(cmd, "unknown output format %q: allowed: name", o.output)
	}
	return o.waitFlags.check(cmd)
}

func (r *root) deleteCmd() *cobra.Command {
	o := &deleteOptions{}
	cmd := &cobra.Command{
		Use:               "delete SANDBOX...",
		Aliases:           []string{"rm"},
		Short:             "Delete sandboxes (their VMs stop; their snapshots stay)",
		Example:           "  kubectl sandlot delete my-sandbox other-sandbox --wait\n  kubectl sandlot delete my-sandbox -o name",
		Args:              args(1, -1, "one or more SANDBOX names"),
		ValidArgsFunction: r.completeSandboxes,
		RunE:              func(cmd *cobra.Command, args []string) error { return r.delete(cmd, o, args) },
	}
	o.add(cmd, "the sandboxes are gone (their pods and VMs stopped)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: the command's own lines when empty, or name (sandbox.sandlot.dev/NAME per deleted sandbox).")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"name"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// delete deletes every named sandbox it can; the missing ones are
// reported together at the end.
func (r *root) delete(cmd *cobra.Command, o *deleteOptions, names []string) error {
	w := &o.waitFlags
	return r.begin(cmd, o, func(ctx context.Context, s *session) error {
		line := "sandbox/%s deleted\n"
		if o.output == "name" {
			line = "sandbox." + sandlotv1.GroupVersion.Group + "/%s\n"
		}
		var errs []error
		var deleted []string
		for _, name := range names {
			sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}}
			switch err := s.c.Delete(ctx, sbx); {
			case apierrors.IsNotFound(err):
				errs = append(errs, &notFoundError{"sandbox", name, s.ns})
			case err != nil:
				errs = append(errs, fmt.Errorf("delete sandbox %s: %w", name, err))
			default:
				deleted = append(deleted, name)
				fmt.Fprintf(s.out, line, name)
			}
		}
		if w.wait && len(deleted) > 0 {
			errs = append(errs, s.waitGone(ctx, w, deleted))
		}
		return errors.Join(errs...)
	})
}

// waitGone waits until none of the sandboxes exists any more (their
// finalizer holds them until their pods, and so their VMs, are gone).
func (s *session) waitGone(ctx context.Context, w *waitFlags, names []string) error {
	what := "sandbox/" + strings.Join(names, ", sandbox/") + " to be gone"
	return s.wait(ctx, w, what, &sandlotv1.SandboxList{}, names, func(objs objects, p *progress) (bool, error) {
		left := 0
		for _, n := range names {
			if o, ok := objs[n]; ok {
				left++
				p.show("sandbox/"+n, "deleting, "+sandboxState(o.(*sandlotv1.Sandbox)))
			} else {
				p.show("sandbox/"+n, "gone")
			}
		}
		return left == 0, nil
	})
}

package kubectl

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// completionTimeout keeps a slow or unreachable API server from hanging
// the shell's <TAB>.
const completionTimeout = 5 * time.Second

const noFiles = cobra.ShellCompDirectiveNoFileComp

// names lists the names of list's items in the namespace the flags pick
// that start with prefix, are not in skip, and pass keep (nil: all).
// Completion stays silent on errors: a shell has nowhere to show them.
func (r *root) names(cmd *cobra.Command, list client.ObjectList, prefix string, skip []string, keep func(client.Object) bool) []cobra.Completion {
	s, err := r.session()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	var opts []client.ListOption
	if _, namespaced := list.(*corev1.NamespaceList); !namespaced {
		opts = append(opts, client.InNamespace(s.ns))
	}
	if err := s.c.List(ctx, list, opts...); err != nil {
		return nil
	}
	objs, err := byName(list)
	if err != nil {
		return nil
	}
	var out []cobra.Completion
	for name, o := range objs {
		if strings.HasPrefix(name, prefix) && !slices.Contains(skip, name) && (keep == nil || keep(o)) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// completeSandboxes completes the first argument with the sandboxes the
// command applies to: pause the running ones, resume the paused ones.
func (r *root) completeSandboxes(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 && cmd.Name() != "delete" {
		return nil, noFiles
	}
	var keep func(client.Object) bool
	switch cmd.Name() {
	case "pause":
		keep = func(o client.Object) bool { return !o.(*sandlotv1.Sandbox).Spec.Paused }
	case "resume":
		keep = func(o client.Object) bool { return o.(*sandlotv1.Sandbox).Spec.Paused }
	}
	return r.names(cmd, &sandlotv1.SandboxList{}, prefix, args, keep), noFiles
}

// completeCloneSources offers snapshots, then sandboxes.
func (r *root) completeCloneSources(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, noFiles
	}
	out := r.names(cmd, &sandlotv1.SnapshotList{}, prefix, nil, nil)
	return append(out, r.names(cmd, &sandlotv1.SandboxList{}, prefix, out, nil)...), noFiles
}

// completeOwnSnapshots completes rollback's --to with the snapshots
// taken of the sandbox named first (all snapshots before it is named).
func (r *root) completeOwnSnapshots(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var keep func(client.Object) bool
	if len(args) > 0 {
		keep = func(o client.Object) bool { return o.(*sandlotv1.Snapshot).Spec.Source.Sandbox == args[0] }
	}
	return r.names(cmd, &sandlotv1.SnapshotList{}, prefix, nil, keep), noFiles
}

func (r *root) completeTemplates(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return r.names(cmd, &sandlotv1.TemplateList{}, prefix, nil, nil), noFiles
}

func (r *root) completeNamespaces(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return r.names(cmd, &corev1.NamespaceList{}, prefix, nil, nil), noFiles
}

// completeCp offers SANDBOX: for the sandboxes with a pod (without a
// space after it); with none matching, the shell completes local files.
// Paths in a sandbox are not completed; after SANDBOX:PATH comes a local
// path.
func (r *root) completeCp(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	switch {
	case len(args) >= 2 || parseCpArg(prefix).sandbox != "":
		return nil, noFiles
	case len(args) == 1 && parseCpArg(args[0]).sandbox != "":
		return nil, cobra.ShellCompDirectiveDefault
	}
	keep := func(o client.Object) bool { return o.(*sandlotv1.Sandbox).Status.PodName != "" }
	out := r.names(cmd, &sandlotv1.SandboxList{}, prefix, nil, keep)
	for i := range out {
		out[i] += ":"
	}
	return out, cobra.ShellCompDirectiveNoSpace
}

package kubectl

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// listKind is one kind `ls` lists: its Kind, list type and table.
type listKind struct {
	name    string
	aliases []string
	kind    string
	newList func() client.ObjectList
	table   func(list client.ObjectList, wide bool, now time.Time) *table
}

var listKinds = []listKind{
	{"sandboxes", []string{"sandbox", "sbx"}, "Sandbox", func() client.ObjectList { return &sandlotv1.SandboxList{} }, sandboxTable},
	{"snapshots", []string{"snapshot", "snap", "snaps"}, "Snapshot", func() client.ObjectList { return &sandlotv1.SnapshotList{} }, snapshotTable},
	{"paused", []string{"pausedsandboxes", "pausedsandbox", "psbx"}, "PausedSandbox", func() client.ObjectList { return &sandlotv1.PausedSandboxList{} }, pausedTable},
	{"templates", []string{"template", "tpl"}, "Template", func() client.ObjectList { return &sandlotv1.TemplateList{} }, templateTable},
}

// kindNames is "sandboxes, snapshots, paused or templates".
func kindNames() string {
	names := make([]string, len(listKinds))
	for i, k := range listKinds {
		names[i] = k.name
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func findListKind(name string) (listKind, bool) {
	for _, k := range listKinds {
		if k.name == name {
			return k, true
		}
		for _, a := range k.aliases {
			if a == name {
				return k, true
			}
		}
	}
	return listKind{}, false
}

func completeKinds(_ *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, k := range listKinds {
		if len(args) == 0 && strings.HasPrefix(k.name, prefix) {
			out = append(out, k.name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

type lsOptions struct {
	out           outputFlags
	allNamespaces bool
}

func (r *root) lsCmd() *cobra.Command {
	o := &lsOptions{}
	cmd := &cobra.Command{
		Use:     "ls [sandboxes|snapshots|paused|templates]",
		Aliases: []string{"list", "get"},
		Short:   "List sandboxes, snapshots, paused sandboxes (with their remoteStatus) or templates",
		Example: "  kubectl sandlot ls\n  kubectl sandlot ls -o wide\n  kubectl sandlot ls snapshots -o yaml\n" +
			"  kubectl sandlot ls paused -A\n  kubectl sandlot ls templates\n  kubectl sandlot ls -o name",
		Args:              args(0, 1, "at most one kind ("+kindNames()+")"),
		ValidArgsFunction: completeKinds,
		RunE:              func(cmd *cobra.Command, args []string) error { return r.ls(cmd, o, args) },
	}
	o.out.add(cmd, "a table")
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list across all namespaces")
	return cmd
}

func (r *root) ls(cmd *cobra.Command, o *lsOptions, args []string) error {
	kind := listKinds[0]
	if len(args) == 1 {
		var ok bool
		if kind, ok = findListKind(args[0]); !ok {
			return errUsage(cmd, "unknown kind %q: expected %s", args[0], kindNames())
		}
	}
	if err := o.out.check(cmd); err != nil {
		return err
	}
	s, err := r.session()
	if err != nil {
		return err
	}
	list, err := s.list(cmd.Context(), kind, o.allNamespaces)
	if err != nil {
		return err
	}
	if f := o.out.format; f == "" || f == "wide" {
		return kind.table(list, f == "wide", time.Now()).print(s.out, o.allNamespaces, kind.name)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return fmt.Errorf("read %s: %w", kind.name, err)
	}
	objs := make([]client.Object, len(items))
	for i, it := range items {
		objs[i] = it.(client.Object)
	}
	return o.out.printObjects(s.out, objs, true)
}

// list lists kind in the session's namespace (or all).
func (s *session) list(ctx context.Context, kind listKind, all bool) (client.ObjectList, error) {
	list := kind.newList()
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(s.ns))
	}
	if err := s.c.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("list %s: %w", kind.name, err)
	}
	return list, nil
}

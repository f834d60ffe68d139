package kubectl

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// listKind is one kind `ls` lists: its list type and its table.
type listKind struct {
	name    string
	aliases []string
	newList func() client.ObjectList
	table   func(list client.ObjectList, wide bool, now time.Time) *table
}

var listKinds = []listKind{
	{"sandboxes", []string{"sandbox", "sbx"}, func() client.ObjectList { return &sandlotv1.SandboxList{} }, sandboxTable},
	{"snapshots", []string{"snapshot", "snap", "snaps"}, func() client.ObjectList { return &sandlotv1.SnapshotList{} }, snapshotTable},
	{"paused", []string{"pausedsandboxes", "pausedsandbox", "psbx"}, func() client.ObjectList { return &sandlotv1.PausedSandboxList{} }, pausedTable},
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
	print         *genericclioptions.PrintFlags
	allNamespaces bool
}

func (r *root) lsCmd() *cobra.Command {
	o := &lsOptions{print: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme)}
	cmd := &cobra.Command{
		Use:               "ls [sandboxes|snapshots|paused]",
		Aliases:           []string{"list", "get"},
		Short:             "List sandboxes, snapshots or paused sandboxes (with their remoteStatus)",
		Example:           "  kubectl sandlot ls\n  kubectl sandlot ls -o wide\n  kubectl sandlot ls snapshots -o yaml\n  kubectl sandlot ls paused -A",
		Args:              args(0, 1, "at most one kind (sandboxes, snapshots or paused)"),
		ValidArgsFunction: completeKinds,
		RunE:              func(cmd *cobra.Command, args []string) error { return r.ls(cmd, o, args) },
	}
	o.print.AddFlags(cmd)
	cmd.Flag("output").Usage = fmt.Sprintf("Output format: a table when empty, or one of (wide, %s).", strings.Join(o.print.AllowedFormats(), ", "))
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list across all namespaces")
	return cmd
}

func (r *root) ls(cmd *cobra.Command, o *lsOptions, args []string) error {
	kind := listKinds[0]
	if len(args) == 1 {
		var ok bool
		if kind, ok = findListKind(args[0]); !ok {
			return errUsage(cmd, "unknown kind %q: expected sandboxes, snapshots or paused", args[0])
		}
	}
	format := *o.print.OutputFormat
	if format != "" && format != "wide" {
		if _, err := o.print.ToPrinter(); err != nil {
			return errUsage(cmd, "%v", err)
		}
	}
	s, err := r.session()
	if err != nil {
		return err
	}
	list, err := s.list(cmd.Context(), kind, o.allNamespaces)
	if err != nil {
		return err
	}
	if format == "" || format == "wide" {
		return kind.table(list, format == "wide", time.Now()).print(s.out, o.allNamespaces, kind.name)
	}
	printer, _ := o.print.ToPrinter()
	u, err := unstructuredList(list)
	if err != nil {
		return err
	}
	return printer.PrintObj(u, s.out)
}

// unstructuredList converts a typed list for cli-runtime's printers:
// -o name, jsonpath and go-template take lists only in this form.
func unstructuredList(list client.ObjectList) (*unstructured.UnstructuredList, error) {
	gvks, _, err := scheme.ObjectKinds(list)
	if err != nil {
		return nil, fmt.Errorf("type the list: %w", err)
	}
	list.GetObjectKind().SetGroupVersionKind(gvks[0])
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(list)
	if err != nil {
		return nil, fmt.Errorf("convert the list: %w", err)
	}
	u := &unstructured.UnstructuredList{}
	u.SetUnstructuredContent(content)
	return u, nil
}

// list lists kind in the session's namespace (or all), each item typed
// so that json and yaml output carry apiVersion and kind.
func (s *session) list(ctx context.Context, kind listKind, all bool) (client.ObjectList, error) {
	list := kind.newList()
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(s.ns))
	}
	if err := s.c.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("list %s: %w", kind.name, err)
	}
	objs, err := byName(list)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		gvks, _, err := scheme.ObjectKinds(o)
		if err != nil {
			return nil, fmt.Errorf("type %s %s: %w", kind.name, o.GetName(), err)
		}
		o.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	return list, nil
}

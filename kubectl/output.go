package kubectl

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// outputFlags is -o, as kubectl get has it: empty for the command's own
// text (a table for ls), wide for a table with more columns, or one of
// cli-runtime's printers (json, yaml, name, jsonpath, go-template, ...)
// printing the API objects themselves.
type outputFlags struct {
	print    *genericclioptions.PrintFlags
	template bool   // --template is the printers' (not create's own)
	format   string // what check settled: -o, or go-template for --template alone
}

// add binds -o and the printers' flags (--template,
// --show-managed-fields, ...); text says what an empty -o prints. A
// command with a --template of its own (create) keeps it: its templates
// go inline, -o go-template='{{...}}'.
func (o *outputFlags) add(cmd *cobra.Command, text string) {
	o.print = genericclioptions.NewPrintFlags("").WithTypeSetter(scheme)
	o.template = cmd.Flags().Lookup("template") == nil
	if !o.template {
		o.print.TemplatePrinterFlags.TemplateArgument = nil
	}
	o.print.AddFlags(cmd)
	cmd.Flag("output").Usage = fmt.Sprintf("Output format: %s when empty, or one of: %s.", text, strings.Join(o.formats(), ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(o.formats(), cobra.ShellCompDirectiveNoFileComp))
}

// formats are the values -o takes.
func (o *outputFlags) formats() []string {
	return append([]string{"wide"}, o.print.AllowedFormats()...)
}

// check refuses an unknown -o naming the allowed ones, before any API
// call.
func (o *outputFlags) check(cmd *cobra.Command) error {
	o.format = *o.print.OutputFormat
	if o.format == "" && o.template && cmd.Flag("template").Changed {
		o.format = "go-template"
	}
	if o.format == "" || o.format == "wide" {
		return nil
	}
	if _, err := o.print.ToPrinter(); err != nil {
		if genericclioptions.IsNoCompatiblePrinterError(err) {
			return errUsage(cmd, "unknown output format %q: allowed: %s", o.format, strings.Join(o.formats(), ", "))
		}
		return errUsage(cmd, "-o %s: %v", o.format, err)
	}
	return nil
}

// objects says whether -o asks for the objects rather than the
// command's own text.
func (o *outputFlags) objects() bool { return o.format != "" }

// emit prints the objects a command made or changed as -o asks (nothing
// when it asks for the command's text): one alone, several as a List.
func (o *outputFlags) emit(w io.Writer, objs ...client.Object) error {
	if !o.objects() {
		return nil
	}
	return o.printObjects(w, objs, len(objs) != 1)
}

// printObjects prints objs as -o asks: wide as tables (one per kind),
// the others through cli-runtime's printers, as a v1 List when list is
// set (kubectl get prints one for any listing) and as the object itself
// otherwise.
func (o *outputFlags) printObjects(w io.Writer, objs []client.Object, list bool) error {
	if o.format == "wide" || o.format == "" {
		return printTables(w, objs, o.format == "wide", false, time.Now())
	}
	printer, err := o.print.ToPrinter()
	if err != nil {
		return err
	}
	var obj runtime.Object
	if list {
		obj, err = toList(objs)
	} else {
		obj, err = toUnstructured(objs[0])
	}
	if err != nil {
		return err
	}
	return printer.PrintObj(obj, w)
}

// toUnstructured is obj with its apiVersion and kind, in the form
// cli-runtime's printers take (jsonpath and templates need it).
func toUnstructured(obj client.Object) (*unstructured.Unstructured, error) {
	if err := setKind(obj); err != nil {
		return nil, err
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", obj.GetName(), err)
	}
	return &unstructured.Unstructured{Object: content}, nil
}

// toList is the v1 List kubectl get -o prints for several objects.
func toList(objs []client.Object) (*unstructured.UnstructuredList, error) {
	list := &unstructured.UnstructuredList{Object: map[string]any{
		"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}}}
	list.Items = []unstructured.Unstructured{}
	for _, obj := range objs {
		u, err := toUnstructured(obj)
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *u)
	}
	return list, nil
}

// setKind sets obj's apiVersion and kind from the scheme (typed objects
// read or watched through the client come without them).
func setKind(obj runtime.Object) error {
	gvks, _, err := scheme.ObjectKinds(obj)
	if err != nil {
		return fmt.Errorf("type %T: %w", obj, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	return nil
}

// printTables prints objs as ls does, one table per kind (in ls's
// order), a blank line between them.
func printTables(w io.Writer, objs []client.Object, wide, withNamespace bool, now time.Time) error {
	first := true
	for _, k := range listKinds {
		var items []runtime.Object
		for _, obj := range objs {
			if err := setKind(obj); err != nil {
				return err
			}
			if obj.GetObjectKind().GroupVersionKind().Kind == k.kind {
				items = append(items, obj)
			}
		}
		if len(items) == 0 {
			continue
		}
		list := k.newList()
		if err := meta.SetList(list, items); err != nil {
			return fmt.Errorf("list %s: %w", k.name, err)
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		if err := k.table(list, wide, now).print(w, withNamespace, k.name); err != nil {
			return err
		}
	}
	return nil
}

// changeFlags are the flags of the commands that change sandboxes or
// make objects: --wait, --timeout and -o. With -o the command's own
// lines go to stderr and stdout holds the objects alone.
type changeFlags struct {
	waitFlags
	out outputFlags
}

// add binds the flags; what is what --wait waits for.
func (c *changeFlags) add(cmd *cobra.Command, what string) {
	c.waitFlags.add(cmd, what)
	c.out.add(cmd, "the command's own lines")
}

func (c *changeFlags) check(cmd *cobra.Command) error {
	if err := c.out.check(cmd); err != nil {
		return err
	}
	return c.waitFlags.check(cmd)
}

func (c *changeFlags) output() *outputFlags { return &c.out }

// printing is a waiter with -o (see begin).
type printing interface{ output() *outputFlags }

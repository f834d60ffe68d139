package kubectl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// objects are the watched objects by name, as last seen.
type objects map[string]client.Object

// checkFunc looks at the watched objects after the first list and after
// every change: done ends the wait, an error fails it. It reports what it
// sees through the progress.
type checkFunc func(objs objects, p *progress) (done bool, err error)

// waitFlags are --wait and --timeout, its bound (as in kubectl wait).
type waitFlags struct {
	wait    bool
	timeout time.Duration
	// hint follows the error of --timeout without --wait (create: the
	// lifetime --timeout was is --lifetime now).
	hint string
}

// add binds --wait and --timeout.
func (w *waitFlags) add(cmd *cobra.Command, what string) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, "wait until "+what+", showing progress on stderr")
	cmd.Flags().DurationVar(&w.timeout, "timeout", 5*time.Minute, "how long --wait waits before it fails")
}

// check refuses a bound without --wait: it would silently do nothing.
// A deprecated alias of --timeout (create's --wait-timeout) counts too.
func (w *waitFlags) check(cmd *cobra.Command) error {
	changed := cmd.Flag("timeout").Changed
	if f := cmd.Flag("wait-timeout"); f != nil && f.Changed {
		changed = true
	}
	if changed && !w.wait {
		return errUsage(cmd, "--timeout bounds --wait: add --wait%s", w.hint)
	}
	if w.timeout <= 0 {
		return errUsage(cmd, "--timeout must be positive, got %v", w.timeout)
	}
	return nil
}

// context bounds the rest of a command by the wait's timeout: one
// deadline even when a command waits twice (clone).
func (w *waitFlags) context(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.timeout)
}

// waiter is a command's options as begin sees them: waitFlags, or
// options embedding it whose own check tests their flags too, in the
// order the errors are to come (rollback's --to before the wait flags).
type waiter interface {
	check(cmd *cobra.Command) error
	context(ctx context.Context) (context.Context, context.CancelFunc)
}

// wait watches the objects of list's kind in the session's namespace
// (only the one named, when names has one element) until check is done or
// fails, or ctx (from waitFlags.context) ends. what names the awaited
// state in the error a timeout gives.
func (s *session) wait(ctx context.Context, w *waitFlags, what string, list client.ObjectList, names []string, check checkFunc) error {
	opts := []client.ListOption{client.InNamespace(s.ns)}
	if len(names) == 1 {
		opts = append(opts, client.MatchingFields{"metadata.name": names[0]})
	}
	p := newProgress(s.errOut)
	err := watchUntil(ctx, s.c, list, opts, func(objs objects) (bool, error) { return check(objs, p) })
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %v waiting for %s (last seen: %s); raise --timeout to wait longer",
			w.timeout, what, p.summary())
	}
	return err
}

// watchUntil lists what opts select and then watches it from the list's
// resourceVersion, calling check after the list and after every change.
// A watch that ends (the server's timeout, an expired resourceVersion)
// is followed by a new list: the wait never polls.
func watchUntil(ctx context.Context, c client.WithWatch, list client.ObjectList, opts []client.ListOption, check func(objects) (bool, error)) error {
	for {
		l := list.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, l, opts...); err != nil {
			return fmt.Errorf("list %s: %w", kindOf(l), err)
		}
		objs, err := byName(l)
		if err != nil {
			return err
		}
		if done, err := check(objs); done || err != nil {
			return err
		}
		from := &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: l.GetResourceVersion()}}
		w, err := c.Watch(ctx, list.DeepCopyObject().(client.ObjectList), append(opts, from)...)
		if err != nil {
			return fmt.Errorf("watch %s: %w", kindOf(l), err)
		}
		done, err := follow(ctx, w, objs, check)
		w.Stop()
		if done || err != nil {
			return err
		}
	}
}

// follow applies watch events to objs until check is done or fails, ctx
// ends, or the watch ends (false, nil: list again).
func follow(ctx context.Context, w watch.Interface, objs objects, check func(objects) (bool, error)) (bool, error) {
	for {
		var ev watch.Event
		var open bool
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, open = <-w.ResultChan():
		}
		if !open || ev.Type == watch.Error {
			return false, nil
		}
		o, ok := ev.Object.(client.Object)
		if !ok || ev.Type == watch.Bookmark {
			continue
		}
		if ev.Type == watch.Deleted {
			delete(objs, o.GetName())
		} else {
			objs[o.GetName()] = o
		}
		if done, err := check(objs); done || err != nil {
			return done, err
		}
	}
}

func byName(list client.ObjectList) (objects, error) {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", kindOf(list), err)
	}
	objs := objects{}
	for _, it := range items {
		o := it.(client.Object)
		objs[o.GetName()] = o
	}
	return objs, nil
}

// kindOf is a list's kind for messages: "SandboxList" -> "sandboxes",
// "SnapshotList" -> "snapshots".
func kindOf(list client.ObjectList) string {
	gvks, _, err := scheme.ObjectKinds(list)
	if err != nil || len(gvks) == 0 {
		return fmt.Sprintf("%T", list)
	}
	kind := strings.TrimSuffix(gvks[0].Kind, "List")
	if strings.HasSuffix(kind, "x") {
		return strings.ToLower(kind) + "es"
	}
	return strings.ToLower(kind) + "s"
}

// progress prints each watched object's state to stderr when it changes,
// and remembers the last one for a timeout's error.
type progress struct {
	w     io.Writer
	last  map[string]string
	order []string
}

func newProgress(w io.Writer) *progress { return &progress{w: w, last: map[string]string{}} }

// show reports the state of key ("sandbox/x") if it changed.
func (p *progress) show(key, state string) {
	if prev, seen := p.last[key]; seen && prev == state {
		return
	}
	if _, seen := p.last[key]; !seen {
		p.order = append(p.order, key)
	}
	p.last[key] = state
	fmt.Fprintf(p.w, "%s: %s\n", key, state)
}

func (p *progress) summary() string {
	if len(p.order) == 0 {
		return "nothing yet"
	}
	parts := make([]string, 0, len(p.order))
	for _, k := range p.order {
		parts = append(parts, k+": "+p.last[k])
	}
	return strings.Join(parts, "; ")
}

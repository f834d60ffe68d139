package kubectl

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// maxClones bounds --count: more is a typo more often than a wish.
const maxClones = 100

type cloneOptions struct {
	count int
	changeFlags
}

func (r *root) cloneCmd() *cobra.Command {
	o := &cloneOptions{}
	cmd := &cobra.Command{
		Use:   "clone SNAPSHOT|SANDBOX [--count N]",
		Short: "Start N sandboxes from a snapshot, or from a sandbox (snapshotted first)",
		Long: "clone starts --count sandboxes restored from a Snapshot. Given a Sandbox, it snapshots it\n" +
			"first. A name that is both a Snapshot and a Sandbox means the Snapshot; say snapshot/NAME or\n" +
			"sandbox/NAME to choose.",
		Example: "  kubectl sandlot clone my-snapshot --count 3 --wait\n" +
			"  kubectl sandlot clone sandbox/my-sandbox --count 2",
		Args:              args(1, 1, "exactly one SNAPSHOT or SANDBOX"),
		ValidArgsFunction: r.completeCloneSources,
		RunE:              func(cmd *cobra.Command, args []string) error { return r.clone(cmd, o, args[0]) },
	}
	cmd.Flags().IntVar(&o.count, "count", 1, fmt.Sprintf("how many sandboxes to start (1..%d)", maxClones))
	o.changeFlags.add(cmd, "the snapshot is Ready and every clone is usable")
	return cmd
}

// check bounds --count before the wait flags' own check.
func (o *cloneOptions) check(cmd *cobra.Command) error {
	if o.count < 1 || o.count > maxClones {
		return errUsage(cmd, "--count %d is outside 1..%d", o.count, maxClones)
	}
	return o.changeFlags.check(cmd)
}

// clone prints (with -o) the snapshot it took, if any, and the clones.
func (r *root) clone(cmd *cobra.Command, o *cloneOptions, source string) error {
	return r.begin(cmd, o, func(ctx context.Context, s *session) error {
		snap, parent, err := s.cloneSource(ctx, &o.waitFlags, source)
		if err != nil {
			return err
		}
		gens := map[string]int64{}
		var made []client.Object
		if parent != nil { // the snapshot clone took
			made = append(made, snap)
		}
		var clones []client.Object
		for range o.count {
			sbx := newClone(s.ns, snap.Name, parent)
			if err := s.c.Create(ctx, sbx); err != nil {
				return fmt.Errorf("create clone %d of %d from snapshot %s: %w", len(gens)+1, o.count, snap.Name, err)
			}
			gens[sbx.Name] = sbx.Generation
			clones = append(clones, sbx)
			fmt.Fprintf(s.out, "sandbox/%s created from snapshot/%s (id %s)\n", sbx.Name, snap.Name, sandboxID(sbx))
		}
		if o.wait {
			usable, err := s.waitUsable(ctx, &o.waitFlags, gens)
			if err != nil {
				return err
			}
			clones = clones[:0]
			for _, sbx := range usable {
				clones = append(clones, sbx)
			}
		}
		return o.out.emit(s.objects, append(made, clones...)...)
	})
}

// cloneSource resolves the argument of clone to a snapshot, taking a
// snapshot of a sandbox first (and, with --wait, waiting until it is
// Ready, so that a failed snapshot leaves no failed clones behind).
// Clones of a sandbox keep its metadata and network rules, as the E2B
// facade's forks do: it returns that sandbox (nil for a snapshot).
func (s *session) cloneSource(ctx context.Context, w *waitFlags, arg string) (*sandlotv1.Snapshot, *sandlotv1.Sandbox, error) {
	kind, name, typed := strings.Cut(arg, "/")
	if !typed {
		kind, name = "", arg
	}
	switch kind {
	case "", "snapshot", "snap", "snapshots":
		snap, err := s.snapshot(ctx, name)
		if err == nil || kind != "" || !isNotFound(err) {
			return snap, nil, err
		}
	case "sandbox", "sbx", "sandboxes":
	default:
		return nil, nil, fmt.Errorf("clone source %q: expected SNAPSHOT, SANDBOX, snapshot/NAME or sandbox/NAME", arg)
	}
	sbx := &sandlotv1.Sandbox{}
	if err := s.get(ctx, "sandbox", name, sbx); err != nil {
		if kind == "" && isNotFound(err) {
			return nil, nil, fmt.Errorf("no snapshot or sandbox named %s in namespace %s", name, s.ns)
		}
		return nil, nil, err
	}
	snap, err := s.createSnapshot(ctx, sbx, "")
	if err != nil {
		return nil, nil, err
	}
	if w.wait {
		if snap, err = s.waitSnapshot(ctx, w, snap.Name, false); err != nil {
			return nil, nil, err
		}
		fmt.Fprintln(s.out, snapshotLine(snap))
	}
	return snap, sbx, nil
}

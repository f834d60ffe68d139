package kubectl

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

type drainOptions struct {
	timeout time.Duration
}

func (r *root) drainCmd() *cobra.Command {
	o := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "drain NODE",
		Short: "Cordon a node and wait until sandlot has moved its sandboxes to other nodes",
		Long: "drain cordons NODE (as kubectl cordon) and waits while the sandlot controller moves each sandbox\n" +
			"on it: paused there, resumed on another node with the same ID, memory and files (a store every\n" +
			"node shares: s3 or juicefs). It prints each sandbox's moves and ends when none runs on NODE, or\n" +
			"fails naming each sandbox that cannot move and why. Other pods are kubectl drain's to evict:\n" +
			"`kubectl drain NODE --ignore-daemonsets` afterwards finds no sandbox left.",
		Example:           "  kubectl sandlot drain node-1\n  kubectl sandlot drain node-1 --timeout 20m && kubectl drain node-1 --ignore-daemonsets",
		Args:              args(1, 1, "a node name"),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, a []string) error {
			s, err := r.session()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			return s.drain(ctx, a[0])
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 15*time.Minute, "how long to wait for the sandboxes to move")
	return cmd
}

// drain cordons node and follows its sandboxes until none is left there.
func (s *session) drain(ctx context.Context, node string) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": true}})
	n := &corev1.Node{}
	n.Name = node
	if err := s.c.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("cordon node %s: %w", node, err)
	}
	fmt.Fprintf(s.out, "node/%s cordoned\n", node)
	last := map[string]string{}
	for {
		left, blocked, err := s.sandboxesOn(ctx, node, last)
		switch {
		case err != nil:
			return err
		case left == 0:
			fmt.Fprintf(s.out, "node/%s: no sandbox left\n", node)
			return nil
		case blocked != nil && len(blocked) == left:
			return fmt.Errorf("%d sandboxes on %s cannot move:\n  %s", left, node, strings.Join(blocked, "\n  "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: %d sandboxes still there: %w", node, left, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// sandboxesOn counts the sandboxes still on node (running there, or
// paused with their move under way), prints each one's change since
// last, and lists those that say they cannot move.
func (s *session) sandboxesOn(ctx context.Context, node string, last map[string]string) (int, []string, error) {
	list := &sandlotv1.SandboxList{}
	if err := s.c.List(ctx, list); err != nil {
		return 0, nil, fmt.Errorf("list sandboxes: %w", err)
	}
	left, blocked := 0, []string(nil)
	for _, sbx := range list.Items {
		from := sbx.Annotations[sandlotv1.AnnotationMoveFrom]
		if sbx.Status.NodeName != node && from != node {
			continue
		}
		key := sbx.Namespace + "/" + sbx.Name
		line := fmt.Sprintf("%s on %s", sbx.Status.Phase, sbx.Status.NodeName)
		if why := sbx.Annotations[sandlotv1.AnnotationMoveBlocked]; why != "" {
			line += ": cannot move: " + why
			blocked = append(blocked, key+": "+why)
		}
		if last[key] != line {
			fmt.Fprintf(s.out, "sandbox/%s: %s\n", key, line)
			last[key] = line
		}
		if onNode(&sbx, node) {
			left++
		}
	}
	slices.Sort(blocked)
	return left, blocked, nil
}

// onNode: the sandbox still runs on node, or its move off it is under way.
func onNode(sbx *sandlotv1.Sandbox, node string) bool {
	if sbx.Status.Phase.Terminal() {
		return false
	}
	if sbx.Annotations[sandlotv1.AnnotationMoveFrom] == node {
		return true
	}
	return sbx.Status.NodeName == node && sbx.Status.Phase != sandlotv1.SandboxPaused
}

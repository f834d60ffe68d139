package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// checkpointWait bounds the wait for a checkpoint: past it the build goes
// on without (a later build runs those steps again).
const checkpointWait = 2 * time.Minute

// checkpoint asks for the step cache's checkpoint of builder sbx after
// step n — the Template controller snapshots the builder — and waits
// until it is Ready. The build steps are still while it is taken.
func (b *builds) checkpoint(ctx context.Context, sbx *sandlotv1.Sandbox, tpl *sandlotv1.Template, n int) error {
	name := sandlotv1.BuildCheckpointName(tpl, b.Node, n)
	if err := b.setBuilt(ctx, sbx, metav1.ConditionFalse, sandlotv1.ReasonBuildCheckpoint,
		fmt.Sprintf("step %d done: waiting for its checkpoint %s", n, name), n); err != nil {
		return err
	}
	waitErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, checkpointWait, true, func(ctx context.Context) (bool, error) {
		snap := &sandlotv1.Snapshot{}
		if err := b.Reader.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: name}, snap); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		switch snap.Status.Phase {
		case sandlotv1.DataReady:
			return true, nil
		case sandlotv1.DataFailed:
			msg := "no reason given"
			if c := meta.FindStatusCondition(snap.Status.Conditions, sandlotv1.ConditionReady); c != nil {
				msg = c.Message
			}
			return false, errors.New("the checkpoint failed: " + msg)
		}
		return false, nil
	})
	err := b.setBuilt(ctx, sbx, metav1.ConditionFalse, sandlotv1.ReasonBuildRunning,
		fmt.Sprintf("running the build steps after step %d", n), 0)
	if waitErr != nil {
		return fmt.Errorf("checkpoint %s: %w", name, waitErr)
	}
	return err
}

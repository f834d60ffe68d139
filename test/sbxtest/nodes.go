package sbxtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// WaitNotReady waits until the node's Ready condition is not True (its
// kubelet stopped: kube-controller-manager's node monitor says so).
func WaitNotReady(t *testing.T, k client.Client, node string) {
	t.Helper()
	poll.Eventually(t, 2*time.Minute, node+" NotReady", func() error {
		n := &corev1.Node{}
		if err := k.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("still Ready")
	})
}

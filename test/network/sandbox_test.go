package network

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// How often waitApplied looks: fast while a live edit is timed, else at
// the pace of the other cluster waits.
const (
	fast = 50 * time.Millisecond
	slow = 250 * time.Millisecond
)

func key(name string) client.ObjectKey { return client.ObjectKey{Namespace: "default", Name: name} }

// newSandbox creates a sandbox with network rules (deleted when the test
// ends) and waits until it runs and its node enforces them.
func newSandbox(t *testing.T, k client.Client, name string, src sandlotv1.SandboxSource, n *sandlotv1.SandboxNetwork) *sandlotv1.Sandbox {
	t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: sandlotv1.SandboxSpec{Source: src, TimeoutSeconds: ptr.To[int32](1800), Network: n}}
	if err := k.Create(context.Background(), sbx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbxtest.Delete(t, k, name) })
	sbxtest.WaitRunning(t, k, name)
	s, _ := waitApplied(t, k, name, sbx.Generation, slow)
	return s
}

// waitApplied waits until the sandbox runs with NetworkApplied True at its
// generation (at least gen) and status.network equal to spec.network; it
// returns the sandbox and when that was first seen.
func waitApplied(t *testing.T, k client.Client, name string, gen int64, every time.Duration) (*sandlotv1.Sandbox, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var s sandlotv1.Sandbox
	err := poll.Every(ctx, every, fmt.Sprintf("sandbox %s NetworkApplied at generation %d", name, gen), func() error {
		if err := k.Get(ctx, key(name), &s); err != nil {
			return err
		}
		c := meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionNetworkApplied)
		switch {
		case c == nil:
			return errors.New("no NetworkApplied condition")
		case s.Generation < gen || c.ObservedGeneration != s.Generation || c.Status != metav1.ConditionTrue:
			return fmt.Errorf("NetworkApplied %s %s at generation %d of %d: %s", c.Status, c.Reason, c.ObservedGeneration, s.Generation, c.Message)
		case !equality.Semantic.DeepEqual(s.Status.Network, s.Spec.Network):
			return fmt.Errorf("status.network %+v, spec.network %+v", s.Status.Network, s.Spec.Network)
		case s.Status.Phase != sandlotv1.SandboxRunning:
			return fmt.Errorf("phase %s", s.Status.Phase)
		}
		return nil
	})
	seen := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	return &s, seen
}

// editNetwork changes the Sandbox's spec.network as `kubectl edit` does
// (read, change, update); it returns the new generation and when the
// update was sent.
func editNetwork(t *testing.T, k client.Client, name string, edit func(*sandlotv1.SandboxNetwork)) (int64, time.Time) {
	t.Helper()
	var gen int64
	var sent time.Time
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), key(name), &s); err != nil {
			return err
		}
		if s.Spec.Network == nil {
			s.Spec.Network = &sandlotv1.SandboxNetwork{}
		}
		edit(s.Spec.Network)
		sent = time.Now()
		if err := k.Update(context.Background(), &s); err != nil {
			return err
		}
		gen = s.Generation
		return nil
	})
	if err != nil {
		t.Fatalf("update spec.network of %s: %v", name, err)
	}
	return gen, sent
}

// pauseResume pauses a sandbox until its pod is gone, resumes it and
// waits until it runs with its rules enforced again.
func pauseResume(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox) *sandlotv1.Sandbox {
	t.Helper()
	sbxtest.SetPaused(t, k, sbx.Name, true)
	poll.Eventually(t, 2*time.Minute, sbx.Name+" Paused, its pod gone", func() error {
		var s sandlotv1.Sandbox
		if err := k.Get(context.Background(), key(sbx.Name), &s); err != nil {
			return err
		}
		if err := k.Get(context.Background(), key(sbx.Status.PodName), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s still there (%v)", sbx.Status.PodName, err)
		}
		if s.Status.Phase != sandlotv1.SandboxPaused {
			return fmt.Errorf("phase %s (%s)", s.Status.Phase, s.Status.Message)
		}
		return nil
	})
	sbxtest.SetPaused(t, k, sbx.Name, false)
	sbxtest.WaitRunning(t, k, sbx.Name)
	s, _ := waitApplied(t, k, sbx.Name, 0, slow)
	return s
}

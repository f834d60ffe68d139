package sbxtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// Pause pauses a sandbox and waits for Paused with its pod gone and the
// package Ready on its node; it returns the PausedSandbox.
func Pause(t *testing.T, k client.Client, name string) *sandlotv1.PausedSandbox {
	t.Helper()
	key := client.ObjectKey{Namespace: "default", Name: name}
	// Its pod by the name its status gives: a pool pod or start slot it
	// claimed is not named after it.
	var s sandlotv1.Sandbox
	if err := k.Get(context.Background(), key, &s); err != nil {
		t.Fatal(err)
	}
	pod := s.Status.PodName
	SetPaused(t, k, name, true)
	poll.Eventually(t, 2*time.Minute, name+" Paused, pod gone", func() error {
		if err := k.Get(context.Background(), key, &s); err != nil {
			return err
		}
		if err := PodsGone(context.Background(), k, key.Namespace, name, pod); err != nil {
			return err
		}
		if s.Status.Phase != sandlotv1.SandboxPaused {
			return fmt.Errorf("phase %s (%s)", s.Status.Phase, s.Status.Message)
		}
		return nil
	})
	ps := &sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	WaitData(t, k, ps, 10*time.Second, "Ready", ReadyPhase(t))
	return ps
}

// RemoteSequence polls a Snapshot's or PausedSandbox's data until its
// remote status is final and returns the distinct statuses seen, in order.
func RemoteSequence(t *testing.T, k client.Client, o client.Object, timeout time.Duration) []sandlotv1.RemoteStatus {
	t.Helper()
	var seen []sandlotv1.RemoteStatus
	poll.Eventually(t, timeout, o.GetName()+": remote status final", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		st := DataOf(o)
		if st.Phase == sandlotv1.DataFailed {
			t.Fatalf("%s failed: %+v", o.GetName(), st.Conditions)
		}
		r := st.RemoteStatus
		if r != "" && (len(seen) == 0 || seen[len(seen)-1] != r) {
			seen = append(seen, r)
		}
		if r != sandlotv1.RemoteReady && r != sandlotv1.RemoteFailed {
			return fmt.Errorf("seen %v", seen)
		}
		return nil
	})
	return seen
}

// OtherNode is a node of c that is not name.
func OtherNode(c *cluster.Cluster, name string) string {
	for _, n := range c.Nodes {
		if n.Name != name {
			return n.Name
		}
	}
	panic("one node only")
}

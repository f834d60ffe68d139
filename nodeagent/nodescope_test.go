package nodeagent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent"
)

// agentCache starts a cache as the agent's (its CacheOptions, its service
// account's rights) for the test's node and returns it once synced.
func (a *agent) agentCache() cache.Cache {
	a.t.Helper()
	e := cluster(a.t)
	cfg, err := e.ComponentConfig("sandlot-agent")
	if err != nil {
		a.t.Fatal(err)
	}
	opts := nodeagent.CacheOptions(a.node, a.api())
	opts.Scheme = e.Scheme
	c, err := cache.New(cfg, opts)
	if err != nil {
		a.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.t.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		a.t.Fatal("the agent's cache did not start")
	}
	// The Sandbox informer starts with the first read, which waits for it
	// (and fails if the API server refuses the field selector).
	if err := c.List(ctx, &sandlotv1.SandboxList{}, client.InNamespace(a.ns)); err != nil {
		a.t.Fatalf("list sandboxes through the agent's cache: %v", err)
	}
	return c
}

// place plays the controller's status write placing the sandbox on node
// ("": nowhere, as a pause or a return to placement leaves it).
func (a *agent) place(name, node string) {
	a.t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}}
	a.setStatus(sbx, func() { sbx.Status.NodeName = node })
}

// wantCached waits until c holds exactly the named Sandboxes of the
// test's namespace.
func (a *agent) wantCached(c cache.Cache, names ...string) {
	a.t.Helper()
	a.eventually(fmt.Sprintf("the agent's cache holds sandboxes %v only", names), func() error {
		list := &sandlotv1.SandboxList{}
		if err := c.List(context.Background(), list, client.InNamespace(a.ns)); err != nil {
			return err
		}
		got := map[string]bool{}
		for _, s := range list.Items {
			got[s.Name] = true
		}
		if len(got) != len(names) {
			return fmt.Errorf("it holds %v", got)
		}
		for _, n := range names {
			if !got[n] {
				return fmt.Errorf("it holds %v", got)
			}
		}
		return nil
	})
}

// TestAgentCachesItsNodesSandboxes: the agent's cache (its service
// account, its field selector on status.nodeName) holds the Sandboxes
// whose status places them on its node, not another node's nor an
// unplaced one, and follows the status (cleared by a pause, set again by
// a resume).
func TestAgentCachesItsNodesSandboxes(t *testing.T) {
	a := startAgent(t, nil)
	c := a.agentCache()
	a.sandbox("mine", "minesandbox000000001")
	a.sandboxOn("theirs", "theirssandbox0000001", "node-elsewhere")
	a.create(&sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "unplaced"},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: "python"}}})
	a.wantCached(c, "mine")
	if err := c.Get(context.Background(), a.key("theirs"), &sandlotv1.Sandbox{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get another node's sandbox through the agent's cache: %v, want not found", err)
	}

	a.place("mine", "")
	a.wantCached(c)
	a.place("mine", a.node)
	a.wantCached(c, "mine")
	a.place("theirs", a.node)
	a.wantCached(c, "mine", "theirs")
}

// TestAgentLeavesOtherNodesSandboxes: a pod on this node that names a
// Sandbox whose status places it on another node (a pod left behind)
// gets the Sandbox no VMReady and no rollback from this agent; once the
// status places the Sandbox here, the agent sees it and does both.
func TestAgentLeavesOtherNodesSandboxes(t *testing.T) {
	a := startAgent(t, nil)
	a.runningSandbox("mine", "minesandbox000000002")
	theirs := a.sandboxOn("theirs", "theirssandbox0000002", "node-elsewhere")
	a.pod("theirs", map[string]string{sandlotv1.LabelSandbox: "theirs"}, nil, corev1.PodRunning, "Running")
	a.requestRollback(theirs, "theirs-1", "r1")
	a.waitVMReady("mine", metav1.ConditionTrue, "VMRunning") // the agent runs
	poll.Consistently(t, 3*time.Second, "no rollback and no VMReady for a sandbox of another node", func() error {
		if err := a.get(theirs); err != nil {
			return err
		}
		for _, typ := range []string{sandlotv1.ConditionRolledBack, sandlotv1.ConditionVMReady} {
			if c := condition(theirs.Status.Conditions, typ); c.Type != "" {
				return fmt.Errorf("%s is %s %s: %s", typ, c.Status, c.Reason, c.Message)
			}
		}
		return nil
	})

	a.place("theirs", a.node)
	a.waitVMReady("theirs", metav1.ConditionTrue, "VMRunning")
	a.waitRolledBack(theirs, metav1.ConditionFalse, sandlotv1.ReasonRollbackRefused) // no snapshot theirs-1
}

// TestAgentSnapshotsASandboxItsCacheLacks: a snapshot is taken of the
// sandbox's VM on this node though the agent's cache does not hold the
// sandbox (its status write naming the node not seen yet): the sandbox
// is read past the cache. Once the status places it here, its VMReady
// follows.
func TestAgentSnapshotsASandboxItsCacheLacks(t *testing.T) {
	a := startAgent(t, nil)
	sbx := a.sandboxOn("unseen", "unseensandbox0000001", "")
	a.pod("unseen", map[string]string{sandlotv1.LabelSandbox: "unseen"}, nil, corev1.PodRunning, "Running")
	a.waitSnapshot(a.snapshot("unseen-1", sbx), sandlotv1.DataReady)

	a.place("unseen", a.node)
	a.waitVMReady("unseen", metav1.ConditionTrue, "VMRunning")
}

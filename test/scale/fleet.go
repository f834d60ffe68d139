// Package scale simulates a sandlot fleet on a real kube-apiserver: Node
// objects labelled for sandlot, a kubelet that runs their pods and a node
// agent that answers for their VMs, so the real controller and API can be
// driven at a size no test machine runs VMs for (make bench-scale).
//
// The simulated agent writes what the real one does, through the same
// contract (api/v1alpha1): VMReady by server-side apply under the agent's
// field manager, claims marked activated, Snapshots and pause packages
// Ready on their node. It holds no VM: every answer is immediate.
package scale

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
)

// Fleet is the simulated nodes with their kubelet and agent.
type Fleet struct {
	// Nodes is how many nodes; they are named NodeName(i).
	Nodes int
	// PodDelay is how long the kubelet takes to run a pod (the pod
	// sandbox and container start a real node pays).
	PodDelay time.Duration
	// Workers is how many objects the kubelet and the agent each handle
	// at once.
	Workers int
	// AgentCaches is what each node's agent watches ("": NodeCaches).
	AgentCaches AgentCaches

	c      client.Client
	cache  cache.Cache
	agents []cache.Cache // each node's agent cache (not with SharedCache)
	mu     sync.Mutex
	seen   map[string]time.Time // pod UID → when the kubelet first saw it
	nextI  uint32
}

// NodeName is the i-th simulated node's name.
func NodeName(i int) string { return fmt.Sprintf("%s%04d", simPrefix, i) }

// simPrefix begins every simulated node's name.
const simPrefix = "sim-node-"

// simulated: node is one of the fleet's (not the cluster's real node,
// whose kubelet runs the release's pods).
func simulated(node string) bool { return strings.HasPrefix(node, simPrefix) }

// AddNodes creates the fleet's Node objects: Ready, untainted, labelled
// as nodes with sandlot's agent, each with room for many sandboxes.
func (f *Fleet) AddNodes(ctx context.Context, c client.Client) error {
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("512"), corev1.ResourceMemory: resource.MustParse("2Ti"),
		corev1.ResourcePods: resource.MustParse("1000")}
	for i := range f.Nodes {
		// Each node's agent publishes the key the controller seals its
		// claims and builders' tokens to.
		key, err := sealed.NewKey()
		if err != nil {
			return err
		}
		// The labels of a node with sandlot's agent: the chart's agent
		// DaemonSet and RuntimeClass select them (cluster.ChartValues), so
		// the DaemonSet puts an agent pod here, which the fleet's kubelet runs.
		labels := map[string]string{sandlotv1.LabelRuntime: "true", cluster.AgentLabel: "run"}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName(i), Labels: labels,
			Annotations: map[string]string{sandlotv1.AnnotationClaimKey: key.PublicBase64()}}}
		if err := c.Create(ctx, n); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		// Patches, not updates: kube-controller-manager writes new Nodes
		// too (its TTL annotation).
		orig := n.DeepCopy()
		n.Status = corev1.NodeStatus{Capacity: room, Allocatable: room,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}}}
		if err := c.Status().Patch(ctx, n, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("set node %s Ready: %w", n.Name, err)
		}
		// The API server's not-ready taint; no node lifecycle controller
		// runs (cluster.Options.Fleet) to take it away.
		untaint := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"taints":null}}`))
		if err := c.Patch(ctx, n, untaint); err != nil {
			return fmt.Errorf("untaint node %s: %w", n.Name, err)
		}
	}
	return nil
}

// Start runs the kubelet and the agent with cfg (an identity allowed to
// write pods, their status and sandlot's objects) until ctx ends.
func (f *Fleet) Start(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) error {
	if f.Workers <= 0 {
		f.Workers = 8
	}
	f.seen = map[string]time.Time{}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1 // the real kubelets and agents are many clients, each with its own limit
	var err error
	if f.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("fleet client: %w", err)
	}
	// One HTTP client and mapper for every cache: a thousand discoveries
	// and connection pools would cost the bench, not the API server.
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("fleet HTTP client: %w", err)
	}
	opts := cache.Options{Scheme: scheme, HTTPClient: hc, Mapper: f.c.RESTMapper()}
	if f.cache, err = cache.New(cfg, opts); err != nil {
		return fmt.Errorf("fleet cache: %w", err)
	}
	if f.AgentCaches == "" {
		f.AgentCaches = NodeCaches
	}
	if f.AgentCaches != SharedCache {
		if f.agents, err = f.startAgentCaches(ctx, cfg, opts); err != nil {
			return err
		}
	}
	k := &kubelet{f: f}
	a := &agent{f: f}
	for _, s := range []starter{k, a} {
		if err := s.start(ctx); err != nil {
			return err
		}
	}
	go func() { _ = f.cache.Start(ctx) }()
	if !f.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("fleet cache did not sync")
	}
	return nil
}

type starter interface {
	start(ctx context.Context) error
}

// podIP hands out the next pod IP of 10.128.0.0/9.
func (f *Fleet) podIP() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextI++
	i := f.nextI
	return fmt.Sprintf("10.%d.%d.%d", 128+(i>>16)&127, (i>>8)&255, i&255)
}

// firstSeen is when the kubelet first saw a pod (its start is timed from
// then: creationTimestamp has a granularity of one second).
func (f *Fleet) firstSeen(uid string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.seen[uid]
	if !ok {
		t = time.Now()
		f.seen[uid] = t
	}
	return t
}

func (f *Fleet) forget(uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.seen, uid)
}

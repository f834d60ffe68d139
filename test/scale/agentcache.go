package scale

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent"
)

// AgentCaches says what each simulated node's agent watches.
type AgentCaches string

const (
	// NodeCaches: every node runs the real agent's cache configuration
	// (nodeagent.CacheOptions: its node's Sandboxes, pods, Snapshots and
	// pause packages, the API's EndpointSlices), informers of the kinds
	// its reconcilers watch; the simulated agent's work comes from them.
	NodeCaches AgentCaches = "node"
	// AllCaches: the same informers without the node's selectors (every
	// Sandbox to every agent), as the agent was before ecdfb3b: the
	// "before" of the watch fan-out.
	AllCaches AgentCaches = "all"
	// SharedCache: one cache for the whole fleet, no agent watches of its
	// own (what the simulation did before; the cheapest to run).
	SharedCache AgentCaches = "shared"
)

// agentKinds are what the agent's reconcilers watch (nodeagent.Setup).
func agentKinds() []client.Object {
	return []client.Object{&sandlotv1.Snapshot{}, &sandlotv1.PausedSandbox{}, &sandlotv1.Sandbox{}, &corev1.Pod{},
		&discoveryv1.EndpointSlice{}}
}

// agentAPIService is the API Service the agents' caches follow (the
// chart's; here nothing serves it: the informer only costs a watch).
var agentAPIService = types.NamespacedName{Namespace: "sandlot-system", Name: "sandlot-api"}

// startAgentCaches starts one cache per node in mode and returns them.
func (f *Fleet) startAgentCaches(ctx context.Context, cfg *rest.Config, opts cache.Options) ([]cache.Cache, error) {
	var caches []cache.Cache
	for i := range f.Nodes {
		o := nodeagent.CacheOptions(NodeName(i), agentAPIService)
		if f.AgentCaches == AllCaches {
			o = cache.Options{DefaultTransform: o.DefaultTransform}
		}
		o.Scheme, o.HTTPClient, o.Mapper = opts.Scheme, opts.HTTPClient, opts.Mapper
		c, err := cache.New(cfg, o)
		if err != nil {
			return nil, fmt.Errorf("%s's agent cache: %w", NodeName(i), err)
		}
		for _, obj := range agentKinds() {
			if _, err := c.GetInformer(ctx, obj); err != nil {
				return nil, fmt.Errorf("%s's agent informer of %T: %w", NodeName(i), obj, err)
			}
		}
		go func() { _ = c.Start(ctx) }()
		caches = append(caches, c)
	}
	for i, c := range caches {
		if !c.WaitForCacheSync(ctx) {
			return nil, fmt.Errorf("%s's agent cache did not sync", NodeName(i))
		}
	}
	return caches, nil
}

// agentHandler handles one object as node's agent ("": the whole
// fleet's): r is the cache that told it (the agent reads what its own
// informers hold), and it acts only on what is on its node, as the real
// agent's reconcilers check.
type agentHandler func(ctx context.Context, r client.Reader, node string, key client.ObjectKey) (time.Duration, error)

// agentKey is an object as one node's agent saw it (node -1: the fleet's
// shared cache).
type agentKey struct {
	node int
	key  client.ObjectKey
}

// agentQueue is a queue for the agent's handle of obj's kind, fed by
// every node's agent cache (or the fleet's own with SharedCache).
func (f *Fleet) agentQueue(ctx context.Context, obj client.Object, handle agentHandler) error {
	if f.AgentCaches == SharedCache {
		return f.watchQueue(ctx, obj, f.Workers, func(ctx context.Context, key client.ObjectKey) (time.Duration, error) {
			return handle(ctx, f.cache, "", key)
		})
	}
	q := newQueue(ctx, f.Workers, func(ctx context.Context, k agentKey) (time.Duration, error) {
		return handle(ctx, f.agents[k.node], NodeName(k.node), k.key)
	})
	for i, c := range f.agents {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("%s's agent informer of %T: %w", NodeName(i), obj, err)
		}
		if err := feed(inf, q, func(o client.Object) agentKey { return agentKey{i, client.ObjectKeyFromObject(o)} }); err != nil {
			return err
		}
	}
	return nil
}

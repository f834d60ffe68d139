package e2b

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// indexSandboxID indexes Sandboxes by their E2B sandbox ID, which is
// derived from the UID: known the moment a create returns.
const indexSandboxID = "sandlot.dev/sandbox-id"

// Kube is the server's view of one namespace: a cache of its Sandboxes,
// Snapshots, PausedSandboxes, Templates and Secrets (reads), a client
// that writes to the API server, and a wake-up on every change so that
// waits watch instead of polling.
type Kube struct {
	client.Client
	changed *notifier
}

// NewKube starts the cache for namespace and returns once it is synced.
// The cache stops with ctx.
func NewKube(ctx context.Context, cfg *rest.Config, namespace string) (*Kube, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, sandlotv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	if err != nil {
		return nil, fmt.Errorf("create cache: %w", err)
	}
	if err := c.IndexField(ctx, &sandlotv1.Sandbox{}, indexSandboxID, func(o client.Object) []string {
		return []string{sandlotv1.SandboxIDFor(o.GetUID())}
	}); err != nil {
		return nil, fmt.Errorf("index sandboxes by ID: %w", err)
	}
	k := &Kube{changed: newNotifier()}
	for _, o := range []client.Object{&sandlotv1.Sandbox{}, &sandlotv1.Snapshot{}, &sandlotv1.PausedSandbox{},
		&sandlotv1.Template{}, &corev1.Secret{}} {
		inf, err := c.GetInformer(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("informer for %T: %w", o, err)
		}
		if _, err := inf.AddEventHandler(k.changed.handler()); err != nil {
			return nil, fmt.Errorf("watch %T: %w", o, err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !c.WaitForCacheSync(syncCtx) {
		return nil, fmt.Errorf("the cache of namespace %s did not sync (is the API server reachable, are the CRDs installed?)", namespace)
	}
	k.Client, err = client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return k, nil
}

// notifier wakes every waiter on any change: a waiter takes the channel
// before it checks, so a change between its check and its wait is not lost.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: make(chan struct{})} }

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.ch)
	n.ch = make(chan struct{})
}

func (n *notifier) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { n.notify() },
		UpdateFunc: func(any, any) { n.notify() },
		DeleteFunc: func(any) { n.notify() },
	}
}

// waitFor re-checks cond on every change in the cache until it is done,
// fails, or timeout passes (a 504 naming what).
func (k *Kube) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, *apiError)) *apiError {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := k.changed.wait()
		done, err := cond()
		if err != nil || done {
			return err
		}
		select {
		case <-changed:
		case <-deadline.C:
			return errorf(504, "%s: not after %v", what, timeout)
		case <-ctx.Done():
			return errorf(499, "%s: the client went away: %v", what, ctx.Err())
		}
	}
}

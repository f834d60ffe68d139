package scale

import (
	"context"
	"fmt"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// handler handles one object: again > 0 handles it again after that long;
// an error retries it with backoff.
type handler func(ctx context.Context, key client.ObjectKey) (again time.Duration, err error)

// watchQueue feeds the keys of obj's kind from the fleet's cache into a
// queue handled by workers, until ctx ends.
func (f *Fleet) watchQueue(ctx context.Context, obj client.Object, workers int, handle handler) error {
	inf, err := f.cache.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("informer of %T: %w", obj, err)
	}
	return feed(inf, newQueue(ctx, workers, handle), client.ObjectKeyFromObject)
}

// feed adds the key of inf's object to q on every event.
func feed[K comparable](inf cache.Informer, q workqueue.TypedRateLimitingInterface[K], key func(client.Object) K) error {
	enqueue := func(o any) {
		if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if co, ok := o.(client.Object); ok {
			q.Add(key(co))
		}
	}
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	return nil
}

// newQueue is a queue handled by workers until ctx ends.
func newQueue[K comparable](ctx context.Context, workers int, handle func(context.Context, K) (time.Duration, error)) workqueue.TypedRateLimitingInterface[K] {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[K]())
	go func() { <-ctx.Done(); q.ShutDown() }()
	for range workers {
		go func() {
			for {
				key, quit := q.Get()
				if quit {
					return
				}
				again, err := handle(ctx, key)
				switch {
				case err != nil && ctx.Err() == nil:
					q.AddRateLimited(key)
				case again > 0:
					q.Forget(key)
					q.AddAfter(key, again)
				default:
					q.Forget(key)
				}
				q.Done(key)
			}
		}()
	}
	return q
}

// Package queue ranks a controller's events in its priority queue: those
// of objects that already have a node go ahead of new ones.
package queue

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// PriorityPlaced ranks the events of a sandbox that has a node (its pod's
// start, its VMReady, a pause asked of it) ahead of new sandboxes'. The
// queue is otherwise first in, first out: at fleet size thousands of
// creates stood in front of the updates that finish a start (bench-scale
// at 10,000: Running minutes after the pod).
const PriorityPlaced = 10

type request = reconcile.Request

// Ahead enqueues what h enqueues at PriorityPlaced for the objects
// placed says so of; the rest, and events h ranks itself (a resync's
// low priority), as h does.
func Ahead[T client.Object](h handler.TypedEventHandler[T, request], placed func(T) bool) handler.TypedEventHandler[T, request] {
	rank := func(obj T, q workqueue.TypedRateLimitingInterface[request]) workqueue.TypedRateLimitingInterface[request] {
		pq, ok := q.(priorityqueue.PriorityQueue[request])
		if !ok || !placed(obj) {
			return q
		}
		return rankedQueue{PriorityQueue: pq, priority: PriorityPlaced}
	}
	return handler.TypedFuncs[T, request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[request]) {
			h.Create(ctx, e, rank(e.Object, q))
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[T], q workqueue.TypedRateLimitingInterface[request]) {
			h.Update(ctx, e, rank(e.ObjectNew, q))
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[T], q workqueue.TypedRateLimitingInterface[request]) {
			h.Delete(ctx, e, rank(e.Object, q))
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[T], q workqueue.TypedRateLimitingInterface[request]) {
			h.Generic(ctx, e, rank(e.Object, q))
		},
	}
}

// rankedQueue adds at its priority what is added without one.
type rankedQueue struct {
	priorityqueue.PriorityQueue[request]
	priority int
}

func (q rankedQueue) Add(item request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

func (q rankedQueue) AddAfter(item request, d time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: d}, item)
}

func (q rankedQueue) AddRateLimited(item request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

func (q rankedQueue) AddWithOpts(o priorityqueue.AddOpts, items ...request) {
	if o.Priority == nil {
		o.Priority = &q.priority
	}
	q.PriorityQueue.AddWithOpts(o, items...)
}

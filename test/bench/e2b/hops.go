package main

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/bench/stats"
)

// hops times where a create's wall time goes, as a watcher of the
// Sandboxes sees each step land in the API server: the request sent, the
// Sandbox created (sandlot-api), placed or claimed (the controller's
// Scheduled condition), Running with its pod IP (the controller mirroring
// the pod), VMReady (the node agent), and the 201 received (sandlot-api's
// own watch). Each hop is from the step before it; the watch's own
// latency (a few ms) is in every figure alike. A hop can be negative: the
// node agent's VMReady lands before the controller's Scheduled when the
// write that claimed the pod lost a conflict and was made again.
type hops struct {
	mu     sync.Mutex
	byID   map[string]*steps
	cancel context.CancelFunc
	done   chan struct{}
}

type steps struct {
	sent, created, scheduled, running, vmReady, answered time.Time
}

// hopNames are the rows, in the order of a create's path.
var hopNames = []string{
	"hop: request -> Sandbox created",
	"hop: created -> Scheduled (placed or claimed)",
	"hop: Scheduled -> Running with pod IP",
	"hop: Scheduled -> VMReady",
	"hop: last of Running, VMReady -> 201 received",
}

// watchHops starts watching the namespace's Sandboxes.
func watchHops(k client.WithWatch, namespace string) (*hops, error) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := k.Watch(ctx, &sandlotv1.SandboxList{}, client.InNamespace(namespace))
	if err != nil {
		cancel()
		return nil, err
	}
	h := &hops{byID: map[string]*steps{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*sandlotv1.Sandbox); ok && ev.Type != watch.Deleted {
				h.see(s, time.Now())
			}
		}
	}()
	return h, nil
}

func (h *hops) stepsOf(id string) *steps {
	s := h.byID[id]
	if s == nil {
		s = &steps{}
		h.byID[id] = s
	}
	return s
}

// see records the first time each step shows on a Sandbox.
func (h *hops) see(s *sandlotv1.Sandbox, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.stepsOf(sandlotv1.SandboxIDFor(s.UID))
	first(&st.created, at)
	if c := meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionScheduled); c != nil && c.Status == metav1.ConditionTrue {
		first(&st.scheduled, at)
	}
	if s.Status.Phase == sandlotv1.SandboxRunning && s.Status.PodIP != "" {
		first(&st.running, at)
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, sandlotv1.ConditionVMReady); c != nil && c.Status == metav1.ConditionTrue {
		first(&st.vmReady, at)
	}
}

// request records a create's send and 201 times.
func (h *hops) request(id string, sent, answered time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.stepsOf(id)
	st.sent, st.answered = sent, answered
}

func first(t *time.Time, at time.Time) {
	if t.IsZero() {
		*t = at
	}
}

// stop ends the watch and adds each hop's samples to the table under the
// level's name; a create whose steps were not all seen adds to none.
func (h *hops) stop(t *stats.Table, level string) {
	h.cancel()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	rows := make([][]float64, len(hopNames))
	for _, s := range h.byID {
		if s.sent.IsZero() || s.created.IsZero() || s.scheduled.IsZero() || s.running.IsZero() || s.vmReady.IsZero() {
			continue
		}
		ready := s.running
		if s.vmReady.After(ready) {
			ready = s.vmReady
		}
		for i, d := range []time.Duration{s.created.Sub(s.sent), s.scheduled.Sub(s.created),
			s.running.Sub(s.scheduled), s.vmReady.Sub(s.scheduled), s.answered.Sub(ready)} {
			rows[i] = append(rows[i], stats.MS(d))
		}
	}
	for i, name := range hopNames {
		t.Add(level+": "+name, "ms", rows[i], "")
	}
}

package qmp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"
)

// Event is an asynchronous QMP event such as STOP, RESUME, SHUTDOWN or MIGRATION.
type Event struct {
	Name string          // QEMU's event name, e.g. "SHUTDOWN"
	Data json.RawMessage // the "data" member, nil if absent
	Time time.Time       // QEMU's timestamp, zero if absent
}

// Events returns the channel on which every event is delivered. It holds the
// latest 256 events: the reader never blocks on it, and when it is full the
// oldest event is dropped (see DroppedEvents). It is closed when the monitor
// is done. Events that an EventWaiter takes are delivered here too.
func (m *Monitor) Events() <-chan Event { return m.events }

func (m *Monitor) deliverEvent(ev Event) {
	m.notifyWaiters(ev)
	for {
		select {
		case m.events <- ev:
			return
		default:
		}
		// Full: drop the oldest. Only this goroutine sends, so the loop ends.
		select {
		case <-m.events:
			m.dropped.Add(1)
		default:
		}
	}
}

// EventWaiter waits for one event. Create it with ExpectEvent BEFORE sending
// the command that causes the event, so the event cannot be missed.
type EventWaiter struct {
	m     *Monitor
	name  string
	match func(Event) bool
	ch    chan Event
	fired atomic.Bool
}

// ExpectEvent registers interest in the next event called name for which
// match returns true (match may be nil to take any). match runs on the
// reader goroutine: it must be quick and must not call the Monitor.
// Call Wait once, or Cancel if the event is no longer wanted.
func (m *Monitor) ExpectEvent(name string, match func(Event) bool) *EventWaiter {
	w := &EventWaiter{m: m, name: name, match: match, ch: make(chan Event, 1)}
	m.mu.Lock()
	if !m.closed {
		m.waiters[w] = struct{}{}
	}
	m.mu.Unlock()
	return w
}

// Wait blocks until the event arrives, ctx ends or the monitor closes.
func (w *EventWaiter) Wait(ctx context.Context) (Event, error) {
	defer w.Cancel()
	select {
	case ev := <-w.ch:
		return ev, nil
	case <-w.m.done:
		select { // an event that came before the close still counts
		case ev := <-w.ch:
			return ev, nil
		default:
		}
		return Event{}, fmt.Errorf("waiting for event %s: %w", w.name, w.m.err)
	case <-ctx.Done():
		return Event{}, fmt.Errorf("waiting for event %s: %w", w.name, context.Cause(ctx))
	}
}

// Cancel unregisters the waiter. It is safe to call more than once.
func (w *EventWaiter) Cancel() {
	w.m.mu.Lock()
	delete(w.m.waiters, w)
	w.m.mu.Unlock()
}

// WaitEvent registers a waiter for name/match, runs trigger (which may be
// nil) and then waits for the event. Registering first closes the race where
// QEMU emits the event before the reply to trigger's command arrives.
func (m *Monitor) WaitEvent(ctx context.Context, name string, match func(Event) bool,
	trigger func(context.Context) error) (Event, error) {
	w := m.ExpectEvent(name, match)
	defer w.Cancel()
	if trigger != nil {
		if err := trigger(ctx); err != nil {
			return Event{}, err
		}
	}
	return w.Wait(ctx)
}

// notifyWaiters runs match functions outside m.mu so that a slow or
// re-entrant match cannot deadlock command registration.
func (m *Monitor) notifyWaiters(ev Event) {
	m.mu.Lock()
	var cands []*EventWaiter
	for w := range m.waiters {
		if w.name == ev.Name {
			cands = append(cands, w)
		}
	}
	m.mu.Unlock()
	for _, w := range cands {
		if w.match != nil && !w.match(ev) {
			continue
		}
		if w.fired.CompareAndSwap(false, true) {
			w.ch <- ev // buffered 1, sent once
			w.Cancel()
		}
	}
}

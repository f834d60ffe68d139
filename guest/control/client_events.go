package control

import (
	"encoding/json"
	"fmt"
	"sync"
)

// Event is an event pushed by the guest.
type Event struct {
	Name string // EventOutput, EventExit, or a newer event's name
	PID  int
	// Output events.
	Stream string
	Data   []byte
	// Dropped counts bytes of this stream lost before Data: by the guest
	// (no host attached) and by this host (its queue was full, see
	// maxQueueBytes). An output event may carry only a loss, no Data.
	Dropped int64
	// Exit events.
	Exit *ExitStatus
	// Params are the raw params, for events this package does not know.
	Params json.RawMessage
}

// parseEvent decodes an event frame. Known events keep no Params (they
// would double what a queued output event holds); output of a stream the
// protocol does not have is refused, so that a process has two streams to
// account losses for.
func parseEvent(f Frame) (Event, bool) {
	switch f.Event {
	case EventOutput:
		var o OutputEvent
		if json.Unmarshal(f.Params, &o) != nil || (o.Stream != StreamStdout && o.Stream != StreamStderr) {
			return Event{}, false
		}
		return Event{Name: EventOutput, PID: o.PID, Stream: o.Stream, Data: o.Data, Dropped: max(o.Dropped, 0)}, true
	case EventExit:
		var x ExitStatus
		if json.Unmarshal(f.Params, &x) != nil {
			return Event{}, false
		}
		return Event{Name: EventExit, PID: x.PID, Exit: &x}, true
	}
	var p struct {
		PID int `json:"pid"`
	}
	_ = json.Unmarshal(f.Params, &p)
	return Event{Name: f.Event, PID: p.PID, Params: f.Params}, true
}

// Subscription delivers events in order on C, without ever blocking the
// connection: while C is not read, its queue is bounded and drops (see
// maxQueueBytes): output beyond the bound is lost, and the next output
// event of the stream says how much in Dropped.
type Subscription struct {
	C <-chan Event

	pid    int
	owner  *subscriptions
	ch     chan Event
	notify chan struct{}
	stop   chan struct{}

	mu       sync.Mutex
	q        *eventQueue
	finish   bool  // close C once q is drained
	err      error // why C closed early (a pid 0 queue overflowed)
	stopOnce sync.Once
}

// Subscribe delivers the events of one process: first those that came
// before anyone subscribed to it, then new ones; C is closed after its
// exit event. pid 0 subscribes to every event from now on; its C is closed
// when the connection ends, or early when it overflows (Err).
func (c *Client) Subscribe(pid int) *Subscription { return c.subs.add(pid) }

// Events is a subscription to every event from the first call on (one
// shared subscription per Client; a new one after it overflowed).
func (c *Client) Events() <-chan Event {
	ss := &c.subs
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.allEvents == nil {
		ss.allEvents = ss.addLocked(0)
	}
	return ss.allEvents.C
}

func newSubscription(ss *subscriptions, pid int, q *eventQueue) *Subscription {
	ch := make(chan Event)
	s := &Subscription{C: ch, ch: ch, pid: pid, owner: ss, q: q,
		notify: make(chan struct{}, 1), stop: make(chan struct{})}
	s.finish = q.ended
	go s.run()
	return s
}

// Close stops delivery and closes C.
func (s *Subscription) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.owner.remove(s)
}

// Err says why C was closed before the connection ended or the process
// exited: only a pid 0 subscription, whose reader fell too far behind to
// be told what it missed, ends so.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// DroppedEvents counts the events other than output and exit that were
// dropped because C was not read (lost output is in Event.Dropped).
func (s *Subscription) DroppedEvents() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.droppedEvents
}

// push queues ev (or drops it, within the bounds). False when the
// subscription overflowed: it takes no more events and its C closes
// once what it holds is delivered.
func (s *Subscription) push(ev Event) bool {
	s.mu.Lock()
	ok := true
	if !s.finish {
		if err := s.q.add(ev); err != nil {
			s.err = fmt.Errorf("control: subscription to pid %d: %w", s.pid, err)
			s.q.flushDrops(-1)
			s.finish, ok = true, false
		}
		s.finish = s.finish || s.q.ended
	}
	s.mu.Unlock()
	s.wake()
	return ok
}

// end closes C once what is queued (and a report of what was dropped) has
// been delivered: the connection ended.
func (s *Subscription) end() {
	s.mu.Lock()
	if !s.finish {
		s.q.flushDrops(-1)
		s.finish = true
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Subscription) run() {
	defer close(s.ch)
	for {
		s.mu.Lock()
		ev, ok := s.q.pop()
		finish := s.finish
		s.mu.Unlock()
		if !ok {
			if finish {
				return
			}
			select {
			case <-s.notify:
			case <-s.stop:
				return
			}
			continue
		}
		select {
		case s.ch <- ev:
		case <-s.stop:
			return
		}
	}
}

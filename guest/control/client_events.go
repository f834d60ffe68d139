package control

import (
	"encoding/json"
	"sync"
)

// Event is an event pushed by the guest.
type Event struct {
	Name string // EventOutput, EventExit, or a newer event's name
	PID  int
	// Output events.
	Stream  string
	Data    []byte
	Dropped int64
	// Exit events.
	Exit *ExitStatus
	// Params are the raw params, for events this package does not know.
	Params json.RawMessage
}

// Bounds of the events kept for processes nobody has subscribed to yet
// (e.g. output buffered in the guest while no host was attached, which
// arrives as soon as a new Client connects).
const (
	maxUnclaimedBytes = 4 << 20
	maxUnclaimedPIDs  = 1024
)

func parseEvent(f Frame) (Event, bool) {
	ev := Event{Name: f.Event, Params: f.Params}
	switch f.Event {
	case EventOutput:
		var o OutputEvent
		if json.Unmarshal(f.Params, &o) != nil {
			return ev, false
		}
		ev.PID, ev.Stream, ev.Data, ev.Dropped = o.PID, o.Stream, o.Data, o.Dropped
	case EventExit:
		var x ExitStatus
		if json.Unmarshal(f.Params, &x) != nil {
			return ev, false
		}
		ev.PID, ev.Exit = x.PID, &x
	default:
		var p struct {
			PID int `json:"pid"`
		}
		_ = json.Unmarshal(f.Params, &p)
		ev.PID = p.PID
	}
	return ev, true
}

// Subscription delivers events in order on C, without ever blocking the
// connection (it queues without bound: keep reading C, or Close it).
type Subscription struct {
	C <-chan Event

	pid    int
	owner  *subscriptions
	ch     chan Event
	notify chan struct{}
	stop   chan struct{}

	mu       sync.Mutex
	q        []Event
	finish   bool // close C once q is drained
	stopOnce sync.Once
}

// Subscribe delivers the events of one process: first those that came
// before anyone subscribed to it, then new ones; C is closed after its
// exit event. pid 0 subscribes to every event from now on.
func (c *Client) Subscribe(pid int) *Subscription { return c.subs.add(pid) }

// Events is a subscription to every event from the first call on (one
// shared subscription per Client).
func (c *Client) Events() <-chan Event {
	ss := &c.subs
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.allEvents == nil {
		ss.allEvents = ss.addLocked(0)
	}
	return ss.allEvents.C
}

// Close stops delivery and closes C.
func (s *Subscription) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.owner.remove(s)
}

func (s *Subscription) push(ev Event, last bool) {
	s.mu.Lock()
	if !s.finish {
		s.q = append(s.q, ev)
		s.finish = last
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Subscription) end() {
	s.mu.Lock()
	s.finish = true
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Subscription) run() {
	defer close(s.ch)
	for {
		s.mu.Lock()
		if len(s.q) == 0 {
			finish := s.finish
			s.mu.Unlock()
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
		ev := s.q[0]
		s.q[0] = Event{}
		s.q = s.q[1:]
		s.mu.Unlock()
		select {
		case s.ch <- ev:
		case <-s.stop:
			return
		}
	}
}

type subscriptions struct {
	mu        sync.Mutex
	byPID     map[int][]*Subscription
	all       []*Subscription
	allEvents *Subscription
	closed    bool

	unclaimed      map[int][]Event
	unclaimedOrder []int
	unclaimedBytes int
}

func (ss *subscriptions) init() {
	ss.byPID = map[int][]*Subscription{}
	ss.unclaimed = map[int][]Event{}
}

func (ss *subscriptions) add(pid int) *Subscription {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.addLocked(pid)
}

func (ss *subscriptions) addLocked(pid int) *Subscription {
	ch := make(chan Event)
	s := &Subscription{C: ch, ch: ch, pid: pid, owner: ss, notify: make(chan struct{}, 1), stop: make(chan struct{})}
	go s.run()
	if ss.closed {
		s.end()
		return s
	}
	if pid == 0 {
		ss.all = append(ss.all, s)
		return s
	}
	evs, ok := ss.unclaimed[pid]
	if ok {
		ss.dropUnclaimed(pid)
		for _, ev := range evs {
			s.push(ev, ev.Exit != nil)
		}
		if len(evs) > 0 && evs[len(evs)-1].Exit != nil {
			return s // already complete
		}
	}
	ss.byPID[pid] = append(ss.byPID[pid], s)
	return s
}

func (ss *subscriptions) remove(s *Subscription) {
	ss.mu.Lock()
	ss.removeLocked(s)
	ss.mu.Unlock()
}

func (ss *subscriptions) removeLocked(s *Subscription) {
	if s.pid == 0 {
		ss.all = deleteSub(ss.all, s)
		if ss.allEvents == s {
			ss.allEvents = nil
		}
		return
	}
	if subs := deleteSub(ss.byPID[s.pid], s); len(subs) > 0 {
		ss.byPID[s.pid] = subs
	} else {
		delete(ss.byPID, s.pid)
	}
}

func deleteSub(subs []*Subscription, s *Subscription) []*Subscription {
	for i, x := range subs {
		if x == s {
			return append(subs[:i:i], subs[i+1:]...)
		}
	}
	return subs
}

// dispatch runs on the Client's reader.
func (ss *subscriptions) dispatch(ev Event) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range ss.all {
		s.push(ev, false)
	}
	if ev.PID == 0 {
		return
	}
	last := ev.Exit != nil
	subs := ss.byPID[ev.PID]
	if len(subs) == 0 {
		ss.keepUnclaimed(ev)
		return
	}
	for _, s := range subs {
		s.push(ev, last)
	}
	if last {
		delete(ss.byPID, ev.PID)
	}
}

func (ss *subscriptions) keepUnclaimed(ev Event) {
	if _, ok := ss.unclaimed[ev.PID]; !ok {
		ss.unclaimedOrder = append(ss.unclaimedOrder, ev.PID)
	}
	ss.unclaimed[ev.PID] = append(ss.unclaimed[ev.PID], ev)
	ss.unclaimedBytes += len(ev.Data)
	for len(ss.unclaimedOrder) > maxUnclaimedPIDs {
		ss.dropUnclaimed(ss.unclaimedOrder[0])
	}
	for ss.unclaimedBytes > maxUnclaimedBytes {
		if len(ss.unclaimedOrder) > 1 {
			ss.dropUnclaimed(ss.unclaimedOrder[0])
			continue
		}
		// One process alone: drop its oldest output, keep its exit.
		evs := ss.unclaimed[ev.PID]
		i := 0
		for i < len(evs) && evs[i].Exit != nil {
			i++
		}
		if i == len(evs) {
			break
		}
		ss.unclaimedBytes -= len(evs[i].Data)
		ss.unclaimed[ev.PID] = append(evs[:i:i], evs[i+1:]...)
	}
}

// dropUnclaimed forgets the kept events of pid.
func (ss *subscriptions) dropUnclaimed(pid int) {
	for _, e := range ss.unclaimed[pid] {
		ss.unclaimedBytes -= len(e.Data)
	}
	delete(ss.unclaimed, pid)
	for i, p := range ss.unclaimedOrder {
		if p == pid {
			ss.unclaimedOrder = append(ss.unclaimedOrder[:i:i], ss.unclaimedOrder[i+1:]...)
			break
		}
	}
}

func (ss *subscriptions) closeAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for _, s := range ss.all {
		s.end()
	}
	for _, subs := range ss.byPID {
		for _, s := range subs {
			s.end()
		}
	}
	ss.all, ss.byPID = nil, map[int][]*Subscription{}
}

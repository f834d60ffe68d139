package control

import "sync"

// Bounds of the events kept for processes nobody has subscribed to yet
// (e.g. output buffered in the guest while no host was attached, which
// arrives as soon as a new Client connects). Each process's are an
// eventQueue of their own (so within maxQueueBytes); beyond these totals
// the oldest processes' are forgotten.
const (
	maxUnclaimedBytes = 4 << 20
	maxUnclaimedPIDs  = 1024
)

// subscriptions routes the events the reader takes to the subscriptions,
// and keeps those of processes nobody follows (yet).
type subscriptions struct {
	mu        sync.Mutex
	byPID     map[int][]*Subscription
	all       []*Subscription
	allEvents *Subscription
	closed    bool

	unclaimed      map[int]*eventQueue
	unclaimedOrder []int // oldest first
	unclaimedBytes int   // eventCost of all unclaimed events
}

func (ss *subscriptions) init() {
	ss.byPID = map[int][]*Subscription{}
	ss.unclaimed = map[int]*eventQueue{}
}

func (ss *subscriptions) add(pid int) *Subscription {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.addLocked(pid)
}

// addLocked subscribes to pid; the events kept for it come first.
func (ss *subscriptions) addLocked(pid int) *Subscription {
	q := ss.unclaimed[pid]
	if pid == 0 || q == nil {
		q = newEventQueue(pid)
	} else {
		ss.forgetUnclaimed(pid)
	}
	s := newSubscription(ss, pid, q)
	switch {
	case ss.closed:
		s.end()
	case q.ended:
		// Complete already: C closes after the kept exit.
	case pid == 0:
		ss.all = append(ss.all, s)
	default:
		ss.byPID[pid] = append(ss.byPID[pid], s)
	}
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

// dispatch runs on the Client's reader; it never blocks on a subscriber.
func (ss *subscriptions) dispatch(ev Event) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var overflowed []*Subscription
	for _, s := range ss.all {
		if !s.push(ev) {
			overflowed = append(overflowed, s)
		}
	}
	for _, s := range overflowed {
		ss.removeLocked(s)
	}
	if ev.PID == 0 {
		return
	}
	subs := ss.byPID[ev.PID]
	if len(subs) == 0 {
		ss.keepUnclaimed(ev)
		return
	}
	for _, s := range subs {
		s.push(ev) // a single process's queue never overflows
	}
	if ev.Exit != nil {
		delete(ss.byPID, ev.PID)
	}
}

// keepUnclaimed queues ev for a later Subscribe(ev.PID). Once a process's
// exit is kept, later events of its PID are ignored (a subscriber would
// get nothing past the exit).
func (ss *subscriptions) keepUnclaimed(ev Event) {
	q := ss.unclaimed[ev.PID]
	if q == nil {
		for len(ss.unclaimedOrder) >= maxUnclaimedPIDs {
			ss.forgetUnclaimed(ss.unclaimedOrder[0])
		}
		q = newEventQueue(ev.PID)
		ss.unclaimed[ev.PID] = q
		ss.unclaimedOrder = append(ss.unclaimedOrder, ev.PID)
	}
	before := q.bytes
	_ = q.add(ev) // a single process's queue never overflows
	ss.unclaimedBytes += q.bytes - before
	// Over the total, the oldest other processes' events go: the newest
	// process is bounded by its own queue.
	for i := 0; ss.unclaimedBytes > maxUnclaimedBytes && i < len(ss.unclaimedOrder); {
		if pid := ss.unclaimedOrder[i]; pid != ev.PID {
			ss.forgetUnclaimed(pid)
			continue
		}
		i++
	}
}

// forgetUnclaimed drops the kept events of pid.
func (ss *subscriptions) forgetUnclaimed(pid int) {
	if q := ss.unclaimed[pid]; q != nil {
		ss.unclaimedBytes -= q.bytes
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

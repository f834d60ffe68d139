package control

import (
	"bytes"
	"cmp"
	"errors"
	"math"
	"slices"
)

// Host-side queues of guest events are bounded, in bytes and in count: a
// guest (root in the VM is not trusted) may flood output or push events
// without end, and the process holding the Client (the shim, in
// containerd's cgroup) must not grow with it. A flooding guest costs only
// itself.
//
// Why drop, not backpressure. The ideal answer to a full queue would be to
// stop reading the connection, so that the guest blocks on its writes.
// But one connection carries the events of every process and the replies
// to every call, in order: a reply cannot be read without first taking
// every event the guest wrote before it. Stopping the reader for one
// subscription nobody drains would
//   - deadlock any consumer that waits for a reply before it drains its
//     events: Process.Wait then reading Events (the wait reply follows the
//     exit event, which follows all the output); a goroutine that reads C
//     and calls Signal or WriteStdin; and the guest's own writer, blocked,
//     holds up its replies to every other call;
//   - stall everything else behind one slow reader (head-of-line
//     blocking): the shim's pump of an exec blocked on a FIFO containerd
//     no longer reads would freeze the container's log and exit, and
//     containerd's Kill of that very exec would wait for a signal reply
//     queued behind the output nobody takes.
//
// Safe backpressure needs flow control per process in the protocol
// (credits the host grants as it drains), which the guest does not speak.
//
// So the reader never blocks: a full queue drops. What is dropped is said:
//   - output beyond the bound is dropped (a partly fitting event keeps its
//     head) and the number of bytes lost is added to the Dropped field of
//     the next event of that process stream that is delivered, the field
//     in which the guest reports its own drops; a synthetic empty output
//     event carries it when none follows (before the exit, at the end of
//     the connection, or once the reader has caught up);
//   - other events (that this package does not know) beyond the bound are
//     dropped and counted (Subscription.DroppedEvents);
//   - exit events are never dropped. A single process's queue holds at most
//     one (it ends with it); a subscription to every process (pid 0) that
//     would have to hold more than maxQueueExits, or remember losses of
//     more than maxDropKeys streams, cannot keep its promises and ends
//     instead: its C is closed after what it holds, and Err says why.
//
// Order is kept: what a queue holds is delivered in the order it came,
// drops only leave gaps, and a process's exit still comes after all of
// its output (and its loss reports), with C closed after it.
const (
	// maxQueueBytes bounds the cost (eventCost) of the events one queue
	// holds: a subscription's, or one unclaimed process's. 128 of the
	// guest's 32 KiB output chunks.
	maxQueueBytes = 4 << 20
	// maxQueueEvents bounds how many events one queue holds (small events
	// are bounded by count before bytes).
	maxQueueEvents = 8192
	// maxQueueExits bounds the exit events a pid 0 subscription holds.
	maxQueueExits = 1024
	// maxDropKeys bounds the process streams whose losses a pid 0
	// subscription remembers until it can report them.
	maxDropKeys = 1024
	// eventOverhead is what an Event costs beyond its variable parts
	// (struct, slice headers, exit status), roughly.
	eventOverhead = 128
)

// errOverflow ends a subscription to every process that could no longer
// report what it dropped.
var errOverflow = errors.New("event queue overflow: events were not read")

// streamKey names one output stream of one process.
type streamKey struct {
	pid    int
	stream string
}

// eventQueue is a bounded FIFO of events (see the bounds above). It is not
// safe for concurrent use: its owner locks.
type eventQueue struct {
	// single: the queue of one process (pid != 0), which ends with its exit.
	single bool
	ended  bool // single, and the exit is queued: later events are ignored

	evs   []Event
	bytes int // eventCost of evs
	exits int // exit events in evs

	// dropped is output lost per stream, not yet reported in an event.
	dropped map[streamKey]int64
	// droppedEvents counts the other events dropped.
	droppedEvents int64
}

func newEventQueue(pid int) *eventQueue {
	return &eventQueue{single: pid != 0, dropped: map[streamKey]int64{}}
}

// eventCost is what an event held in a queue counts for.
func eventCost(ev Event) int {
	return eventOverhead + len(ev.Name) + len(ev.Stream) + len(ev.Data) + len(ev.Params)
}

// add queues ev, or drops it within the rules above. errOverflow means
// the queue can no longer report its losses (pid 0 only).
func (q *eventQueue) add(ev Event) error {
	if q.ended {
		return nil
	}
	switch {
	case ev.Exit != nil:
		return q.addExit(ev)
	case ev.Name == EventOutput:
		return q.addOutput(ev)
	}
	if !q.fits(eventCost(ev)) {
		q.droppedEvents++
		return nil
	}
	q.append(ev)
	return nil
}

// fits says whether an event of cost bytes may be queued.
func (q *eventQueue) fits(cost int) bool {
	return len(q.evs) < maxQueueEvents && q.bytes+cost <= maxQueueBytes
}

func (q *eventQueue) addExit(ev Event) error {
	q.flushDrops(ev.PID)
	if q.exits >= maxQueueExits {
		return errOverflow
	}
	q.append(ev)
	q.exits++
	q.ended = q.single
	return nil
}

// addOutput queues what fits of an output event; the rest, and the loss
// reported with it, is owed to the stream's next delivered event.
func (q *eventQueue) addOutput(ev Event) error {
	k := streamKey{ev.PID, ev.Stream}
	room := maxQueueBytes - q.bytes - eventCost(Event{Name: ev.Name, Stream: ev.Stream})
	if len(q.evs) >= maxQueueEvents || room < 0 || (room == 0 && len(ev.Data) > 0) {
		return q.drop(k, satAdd(int64(len(ev.Data)), ev.Dropped))
	}
	var cut int64
	if len(ev.Data) > room {
		// Keep the head, copied: a slice of it would pin the whole chunk.
		cut = int64(len(ev.Data) - room)
		ev.Data = bytes.Clone(ev.Data[:room])
	}
	ev.Dropped = satAdd(ev.Dropped, q.dropped[k])
	delete(q.dropped, k)
	q.append(ev)
	if cut > 0 {
		q.dropped[k] = cut // after this event's data: owed to the next one
	}
	return nil
}

// drop records n bytes of stream k as lost.
func (q *eventQueue) drop(k streamKey, n int64) error {
	if n <= 0 {
		return nil
	}
	if _, ok := q.dropped[k]; !ok && len(q.dropped) >= maxDropKeys {
		return errOverflow
	}
	q.dropped[k] = satAdd(q.dropped[k], n)
	return nil
}

// flushDrops queues an empty output event for each stream of pid (every
// process when pid < 0) with an unreported loss, beyond the bounds: there
// are at most maxDropKeys of them.
func (q *eventQueue) flushDrops(pid int) {
	if len(q.dropped) == 0 {
		return
	}
	var keys []streamKey
	for k := range q.dropped {
		if pid < 0 || k.pid == pid {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b streamKey) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.stream, b.stream))
	})
	for _, k := range keys {
		q.append(Event{Name: EventOutput, PID: k.pid, Stream: k.stream, Dropped: q.dropped[k]})
		delete(q.dropped, k)
	}
}

func (q *eventQueue) append(ev Event) {
	q.evs = append(q.evs, ev)
	q.bytes += eventCost(ev)
}

// pop takes the oldest event. A reader that has caught up learns at once
// of the losses no later event has reported yet.
func (q *eventQueue) pop() (Event, bool) {
	if len(q.evs) == 0 {
		if len(q.dropped) == 0 {
			return Event{}, false
		}
		q.flushDrops(-1)
	}
	ev := q.evs[0]
	q.evs[0] = Event{}
	q.evs = q.evs[1:]
	q.bytes -= eventCost(ev)
	if ev.Exit != nil {
		q.exits--
	}
	return ev, true
}

// satAdd adds two byte counts (one of them the guest's word) without
// overflowing.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

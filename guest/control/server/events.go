package server

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sandlot-dev/sandlot/guest/control"
)

// eventQueue delivers events to the attached connection (the sink) and
// keeps them, bounded, while none is attached. Output is bounded per
// process stream and in total (8× that): the oldest bytes are dropped and
// the events say how many (OutputEvent.Dropped). Exit events are never
// dropped.
type eventQueue struct {
	mu       sync.Mutex
	sink     *ServerConn
	cur      atomic.Pointer[ServerConn] // sink, readable without mu
	backlog  []queuedEvent
	perKey   map[streamKey]int // buffered output bytes per stream
	total    int
	maxKey   int
	maxTotal int
	log      *slog.Logger
}

type streamKey struct {
	pid    int
	stream string
}

type queuedEvent struct {
	out  *control.OutputEvent
	exit *control.ExitStatus
}

func (q *eventQueue) init(maxPerStream int, log *slog.Logger) {
	q.perKey = map[streamKey]int{}
	q.maxKey = maxPerStream
	q.maxTotal = 8 * maxPerStream
	q.log = log
}

func (ev queuedEvent) encode() ([]byte, error) {
	if ev.exit != nil {
		return control.EncodeEvent(control.EventExit, ev.exit)
	}
	return control.EncodeEvent(control.EventOutput, ev.out)
}

// emit sends ev to the sink, or queues it when there is none or the write
// fails (the sink is then dropped and closed). A slow host slows the
// emitters down: that is the back-pressure on process output.
func (q *eventQueue) emit(ev queuedEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.sink != nil && len(q.backlog) == 0 {
		if err := q.write(q.sink, ev); err == nil {
			return
		}
		q.sink.closeConn()
		q.setSink(nil)
	}
	q.push(ev)
}

func (q *eventQueue) write(sc *ServerConn, ev queuedEvent) error {
	b, err := ev.encode()
	if err != nil {
		q.log.Error("control: encode event", "err", err)
		return nil // drop it: it would never encode
	}
	return sc.fw.WriteRaw(b)
}

func (q *eventQueue) push(ev queuedEvent) {
	q.backlog = append(q.backlog, ev)
	if ev.out == nil {
		return
	}
	k := streamKey{ev.out.PID, ev.out.Stream}
	q.perKey[k] += len(ev.out.Data)
	q.total += len(ev.out.Data)
	sameStream := func(o *control.OutputEvent) bool { return o.PID == k.pid && o.Stream == k.stream }
	for q.perKey[k] > q.maxKey && q.shed(q.perKey[k]-q.maxKey, sameStream) {
	}
	for q.total > q.maxTotal && q.shed(q.total-q.maxTotal, func(*control.OutputEvent) bool { return true }) {
	}
}

// shed drops up to excess bytes from the oldest queued output matching,
// keeping the newest bytes: the event is trimmed at its head and counts
// what it lost in Dropped; an emptied event is merged into the next event
// of its stream (or stays, empty, to report the loss). It returns false
// when there was nothing to drop.
func (q *eventQueue) shed(excess int, match func(*control.OutputEvent) bool) bool {
	for i, ev := range q.backlog {
		o := ev.out
		if o == nil || len(o.Data) == 0 || !match(o) {
			continue
		}
		k := streamKey{o.PID, o.Stream}
		n := min(excess, len(o.Data))
		o.Data = slices.Clone(o.Data[n:])
		o.Dropped += int64(n)
		q.perKey[k] -= n
		q.total -= n
		if len(o.Data) > 0 {
			return true
		}
		for _, next := range q.backlog[i+1:] {
			if next.out != nil && next.out.PID == k.pid && next.out.Stream == k.stream {
				next.out.Dropped += o.Dropped
				q.backlog = append(q.backlog[:i], q.backlog[i+1:]...)
				break
			}
		}
		return true
	}
	return false
}

func (q *eventQueue) pop() {
	ev := q.backlog[0]
	q.backlog[0] = queuedEvent{}
	q.backlog = q.backlog[1:]
	if ev.out != nil {
		k := streamKey{ev.out.PID, ev.out.Stream}
		q.perKey[k] -= len(ev.out.Data)
		q.total -= len(ev.out.Data)
		if q.perKey[k] <= 0 {
			delete(q.perKey, k)
		}
	}
}

// attach makes sc the sink: the previous sink is closed and the backlog
// is written to sc first.
func (q *eventQueue) attach(sc *ServerConn) {
	// Close the old sink before locking: an emitter may be blocked writing
	// to it (holding mu) and only gives up once it is closed.
	if old := q.cur.Load(); old != nil && old != sc {
		old.closeConn()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.sink != nil && q.sink != sc {
		q.sink.closeConn()
	}
	q.setSink(nil)
	for len(q.backlog) > 0 {
		if err := q.write(sc, q.backlog[0]); err != nil {
			sc.closeConn()
			return
		}
		q.pop()
	}
	q.setSink(sc)
}

func (q *eventQueue) setSink(sc *ServerConn) {
	q.sink = sc
	q.cur.Store(sc)
}

// detach drops sc as the sink, if it is. Close sc's stream first, so a
// write blocked on it gives up and releases the queue.
func (q *eventQueue) detach(sc *ServerConn) {
	q.mu.Lock()
	if q.sink == sc {
		q.setSink(nil)
	}
	q.mu.Unlock()
}

func (q *eventQueue) detachAll() {
	if old := q.cur.Load(); old != nil {
		old.closeConn()
	}
	q.mu.Lock()
	q.setSink(nil)
	q.mu.Unlock()
}

package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"
)

// The tests play the guest's end of the connection themselves (over a
// net.Pipe): it answers ping and start, and writes whatever events the
// test asks, as fast as the Client's reader takes them.

type fakeGuest struct {
	conn net.Conn
	fw   *FrameWriter
	pid  int // start's reply
	done chan struct{}
}

func newFakeGuest(t *testing.T, startPID int) (*Client, *fakeGuest) {
	t.Helper()
	guestEnd, hostEnd := net.Pipe()
	g := &fakeGuest{conn: guestEnd, fw: NewFrameWriter(guestEnd), pid: startPID, done: make(chan struct{})}
	go g.serve()
	c := NewClient(hostEnd)
	t.Cleanup(func() { _ = c.Close(); _ = guestEnd.Close(); <-g.done })
	return c, g
}

// serve answers the host's requests until the connection ends.
func (g *fakeGuest) serve() {
	defer close(g.done)
	fr := NewFrameReader(g.conn, MaxFrameSize)
	for {
		line, err := fr.Next()
		if err != nil {
			return
		}
		req, e := DecodeRequest(line)
		if e != nil {
			continue
		}
		var result any = struct{}{}
		switch req.Method {
		case MethodPing:
			result = PingResult{Version: ProtocolVersion}
		case MethodStart:
			result = StartResult{PID: g.pid}
		}
		b, _ := json.Marshal(result)
		if g.fw.WriteFrame(&Frame{ID: req.ID, Result: b}) != nil {
			return
		}
	}
}

func (g *fakeGuest) event(t *testing.T, name string, params any) {
	t.Helper()
	b, err := EncodeEvent(name, params)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.fw.WriteRaw(b); err != nil {
		t.Fatalf("write %s event: %v", name, err)
	}
}

const floodChunk = 32 << 10 // the guest's output chunk

// flood writes output events of pid, chunks first to first+n-1: every
// fourth on stderr, with data that differs from chunk to chunk. It returns
// each stream's bytes.
func (g *fakeGuest) flood(t *testing.T, pid, first, n int) map[string][]byte {
	t.Helper()
	sent := map[string][]byte{}
	for i := first; i < first+n; i++ {
		stream := StreamStdout
		if i%4 == 3 {
			stream = StreamStderr
		}
		data := make([]byte, floodChunk)
		for j := range data {
			data[j] = byte((i*31 + j*7) % 251)
		}
		g.event(t, EventOutput, OutputEvent{PID: pid, Stream: stream, Data: data})
		sent[stream] = append(sent[stream], data...)
	}
	return sent
}

// caughtUp returns once the reader has dispatched every event written before:
// the guest writes ping's reply after them. That it returns at all shows
// unread queues do not hold the reader up.
func caughtUp(t *testing.T, c *Client) {
	t.Helper()
	if _, err := c.Ping(testCtx(t)); err != nil {
		t.Fatalf("ping behind the flood: %v", err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// queued is what a subscription's queue holds.
func queued(s *Subscription) (bytes, events int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.bytes, len(s.q.evs)
}

func checkBounded(t *testing.T, what string, bytes, events int) {
	t.Helper()
	if bytes > maxQueueBytes || events > maxQueueEvents {
		t.Fatalf("%s holds %d bytes in %d events; bounds %d and %d", what, bytes, events, maxQueueBytes, maxQueueEvents)
	}
	// At least the bound less the one event the delivery goroutine may
	// hold: the flood did fill it.
	if bytes < maxQueueBytes-floodChunk-eventOverhead-16 {
		t.Fatalf("%s holds only %d bytes: the flood did not fill it", what, bytes)
	}
}

// readAll reads C until it is closed.
func readAll(t *testing.T, ch <-chan Event) []Event {
	t.Helper()
	ctx := testCtx(t)
	var evs []Event
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		case <-ctx.Done():
			t.Fatalf("C not closed after %d events", len(evs))
		}
	}
}

// collect reads C until it is closed; the exit event must be the last.
// It returns the events before the exit, and the exit.
func collect(t *testing.T, ch <-chan Event) ([]Event, *ExitStatus) {
	t.Helper()
	evs := readAll(t, ch)
	for i, ev := range evs {
		if ev.Name == EventExit && i != len(evs)-1 {
			t.Fatalf("%s event after the exit", evs[i+1].Name)
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].Exit == nil {
		return evs, nil
	}
	return evs[:len(evs)-1], evs[len(evs)-1].Exit
}

// checkStream replays the output events of one stream against what the
// guest sent, after lost bytes the guest itself reported: every Dropped
// must be exactly the gap before its Data, and all of it accounted for.
func checkStream(t *testing.T, evs []Event, pid int, stream string, guestLost int, sent []byte) (kept int) {
	t.Helper()
	full := append(make([]byte, guestLost), sent...)
	pos := 0
	for _, ev := range evs {
		if ev.Name != EventOutput || ev.Stream != stream || ev.PID != pid {
			continue
		}
		pos += int(ev.Dropped)
		if pos+len(ev.Data) > len(full) || !bytes.Equal(ev.Data, full[pos:pos+len(ev.Data)]) {
			t.Fatalf("%s: %d bytes at %d differ from what was sent there", stream, len(ev.Data), pos)
		}
		pos += len(ev.Data)
		kept += len(ev.Data)
	}
	if pos != len(full) {
		t.Fatalf("%s: data and losses add up to %d bytes; the guest sent %d", stream, pos, len(full))
	}
	return kept
}

// A process's output that nobody reads stays within the bound; the reader
// then gets what was kept, the losses, the exit, and the end of C.
func TestUnreadProcessOutputIsBounded(t *testing.T) {
	const pid, chunks = 42, 400 // 12.5 MiB: three times the bound
	c, g := newFakeGuest(t, pid)
	p, err := c.Start(testCtx(t), StartParams{Args: []string{"flood"}})
	if err != nil {
		t.Fatal(err)
	}
	g.event(t, EventOutput, OutputEvent{PID: pid, Stream: StreamStdout, Dropped: 5}) // the guest's own loss
	sent := g.flood(t, pid, 0, chunks)
	caughtUp(t, c)
	b, n := queued(p.sub)
	checkBounded(t, "the process's queue", b, n)

	// The reader takes some: later output fits again, and carries the loss
	// before it.
	head := make([]Event, 0, 10)
	for range cap(head) {
		head = append(head, <-p.Events())
	}
	more := g.flood(t, pid, chunks, 4)
	for stream, b := range more {
		sent[stream] = append(sent[stream], b...)
	}
	caughtUp(t, c)
	p.sub.mu.Lock()
	owed := len(p.sub.q.dropped)
	p.sub.mu.Unlock()
	if owed != 0 {
		t.Fatalf("losses of %d streams not reported in the output that followed", owed)
	}

	g.event(t, EventExit, ExitStatus{PID: pid, Status: 3})
	g.event(t, EventOutput, OutputEvent{PID: pid, Stream: StreamStdout, Data: []byte("after the exit")})
	caughtUp(t, c)
	evs, exit := collect(t, p.Events())
	if exit == nil || exit.Status != 3 {
		t.Fatalf("exit %+v, want status 3", exit)
	}
	evs = append(head, evs...)
	kept := checkStream(t, evs, pid, StreamStdout, 5, sent[StreamStdout]) +
		checkStream(t, evs, pid, StreamStderr, 0, sent[StreamStderr])
	if kept > maxQueueBytes+4*floodChunk || kept < maxQueueBytes/2 {
		t.Fatalf("delivered %d bytes of output; want most of the %d bound and the 4 later chunks", kept, maxQueueBytes)
	}
	// The later chunks came whole, the first of each stream after the loss.
	later := evs[len(evs)-4:]
	for i, ev := range later {
		wantStream, carries := StreamStdout, i == 0
		if i == 3 {
			wantStream, carries = StreamStderr, true
		}
		if len(ev.Data) != floodChunk || ev.Stream != wantStream || (ev.Dropped > 0) != carries {
			t.Fatalf("later chunk %d: %d bytes of %s after %d lost", i, len(ev.Data), ev.Stream, ev.Dropped)
		}
	}
}

// The subscription to every event (pid 0) is bounded the same way; other
// events beyond the bound are dropped and counted.
func TestUnreadEventsAreBounded(t *testing.T) {
	const pid, chunks, customs = 7, 400, 1000
	c, g := newFakeGuest(t, 0)
	ch := c.Events()
	c.subs.mu.Lock()
	sub := c.subs.allEvents
	c.subs.mu.Unlock()

	sent := g.flood(t, pid, 0, chunks)
	for i := range customs {
		g.event(t, "custom", map[string]int{"pid": pid, "i": i})
	}
	caughtUp(t, c)
	b, n := queued(sub)
	checkBounded(t, "Events()", b, n)
	c.subs.mu.Lock()
	unclaimed := c.subs.unclaimedBytes
	c.subs.mu.Unlock()
	if unclaimed > maxQueueBytes {
		t.Fatalf("%d bytes kept for the unclaimed pid", unclaimed)
	}

	g.event(t, EventExit, ExitStatus{PID: pid, Status: 1})
	caughtUp(t, c)
	_ = g.conn.Close() // pid 0's C closes when the connection ends
	evs, exit := collect(t, ch)
	if exit == nil || exit.PID != pid || exit.Status != 1 {
		t.Fatalf("exit %+v", exit)
	}
	checkStream(t, evs, pid, StreamStdout, 0, sent[StreamStdout])
	checkStream(t, evs, pid, StreamStderr, 0, sent[StreamStderr])
	got := 0
	for _, ev := range evs {
		if ev.Name == "custom" {
			got++
		}
	}
	// The delivery goroutine may have freed one chunk's room: some fit.
	if dropped := sub.DroppedEvents(); dropped == 0 || int64(got)+dropped != customs {
		t.Fatalf("%d custom events delivered, %d counted as dropped; want %d in all, some dropped", got, dropped, customs)
	}
	if err := sub.Err(); err != nil {
		t.Fatalf("Err after the connection ended: %v", err)
	}
}

// A process nobody has subscribed to yet is kept within the same bound,
// and delivered in full (kept data, losses, exit) to its subscriber.
func TestUnclaimedOutputIsBounded(t *testing.T) {
	const pid = 9
	c, g := newFakeGuest(t, 0)
	sent := g.flood(t, pid, 0, 300)
	g.event(t, EventExit, ExitStatus{PID: pid, Status: 0})
	g.event(t, EventExit, ExitStatus{PID: pid, Status: 5}) // past the exit: ignored
	caughtUp(t, c)
	c.subs.mu.Lock()
	q := c.subs.unclaimed[pid]
	b, n := q.bytes, len(q.evs)
	total := c.subs.unclaimedBytes
	c.subs.mu.Unlock()
	// The loss reports and the exit come on top of the bound.
	if b != total || b > maxQueueBytes+3*(eventOverhead+16) || n > maxQueueEvents {
		t.Fatalf("unclaimed: %d bytes (%d in all) in %d events", b, total, n)
	}

	evs, exit := collect(t, c.Subscribe(pid).C)
	if exit == nil || exit.Status != 0 {
		t.Fatalf("exit %+v", exit)
	}
	checkStream(t, evs, pid, StreamStdout, 0, sent[StreamStdout])
	checkStream(t, evs, pid, StreamStderr, 0, sent[StreamStderr])
}

// Many processes nobody follows: the oldest are forgotten.
func TestUnclaimedProcessesAreBounded(t *testing.T) {
	c, g := newFakeGuest(t, 0)
	for pid := 1; pid <= 2*maxUnclaimedPIDs; pid++ {
		g.event(t, EventOutput, OutputEvent{PID: pid, Stream: StreamStdout, Data: []byte("hello")})
		g.event(t, EventExit, ExitStatus{PID: pid})
	}
	caughtUp(t, c)
	c.subs.mu.Lock()
	pids, order, total := len(c.subs.unclaimed), len(c.subs.unclaimedOrder), c.subs.unclaimedBytes
	_, newest := c.subs.unclaimed[2*maxUnclaimedPIDs]
	c.subs.mu.Unlock()
	if pids != maxUnclaimedPIDs || order != pids || total > maxUnclaimedBytes || !newest {
		t.Fatalf("kept %d processes (%d in order, newest kept: %v), %d bytes", pids, order, newest, total)
	}
}

// A subscription to every event that cannot hold one more exit ends,
// says why, and first delivers what it holds, in order.
func TestUnreadExitsOverflow(t *testing.T) {
	c, g := newFakeGuest(t, 0)
	sub := c.Subscribe(0)
	// One more than the bound beyond the event delivery may hold.
	for pid := 1; pid <= maxQueueExits+2; pid++ {
		g.event(t, EventExit, ExitStatus{PID: pid})
	}
	caughtUp(t, c)
	if err := sub.Err(); !errors.Is(err, errOverflow) {
		t.Fatalf("Err = %v, want an overflow", err)
	}
	evs := readAll(t, sub.C)
	n := 0
	for _, ev := range evs {
		n++
		if ev.Exit == nil || ev.PID != n {
			t.Fatalf("event %d: %s of pid %d", n, ev.Name, ev.PID)
		}
	}
	if n != maxQueueExits && n != maxQueueExits+1 {
		t.Fatalf("%d exits delivered before the end, want %d (+1)", n, maxQueueExits)
	}
	if c.Err() != nil {
		t.Fatalf("the connection ended: %v", c.Err())
	}
}

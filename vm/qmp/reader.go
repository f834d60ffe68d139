package qmp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"time"
)

// message is any line QEMU sends after the greeting.
type message struct {
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
	Return json.RawMessage `json:"return"`
	Error  *Error          `json:"error"`
	ID     json.RawMessage `json:"id"`
}

func (m *Monitor) readLoop(sc *bufio.Scanner) {
	for sc.Scan() {
		m.dispatch(sc.Bytes())
	}
	err := sc.Err() // bufio.ErrTooLong for an oversized line: the stream is lost
	if err == nil {
		err = io.EOF
	}
	m.shutdown(err)
}

// dispatch handles one line. Bad input is counted and skipped, never fatal:
// a garbled line must not take down the connection to a healthy QEMU.
func (m *Monitor) dispatch(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	var msg message
	if err := json.Unmarshal(line, &msg); err != nil {
		m.skipped.Add(1)
		return
	}
	switch {
	case msg.Event != "":
		m.deliverEvent(msg.event())
	case msg.Return != nil || msg.Error != nil:
		m.deliverReply(&msg)
	default:
		m.skipped.Add(1)
	}
}

func (msg *message) event() Event {
	ev := Event{Name: msg.Event, Data: msg.Data}
	if ts := msg.Timestamp; ts != nil && ts.Seconds >= 0 && ts.Microseconds >= 0 {
		ev.Time = time.Unix(ts.Seconds, ts.Microseconds*1000)
	}
	return ev
}

// deliverReply hands a reply to the command with the same id. A reply without
// an id (QEMU omits it when it could not parse the request) goes to
// the oldest pending command, because without OOB QMP answers in order.
func (m *Monitor) deliverReply(msg *message) {
	r := reply{ret: msg.Return, err: msg.Error}
	m.mu.Lock()
	var id uint64
	var ok bool
	if len(msg.ID) == 0 {
		id, ok = m.oldestPendingLocked()
	} else {
		id, ok = parseID(msg.ID) // an id we never send is not ours: skip it
	}
	ch, found := m.pending[id]
	if found {
		delete(m.pending, id)
	}
	m.mu.Unlock()
	if !ok || !found {
		m.skipped.Add(1) // e.g. the caller gave up (ctx) before the reply came
		return
	}
	ch <- r // buffered 1 and sent exactly once: never blocks
}

func parseID(raw json.RawMessage) (uint64, bool) {
	id, err := strconv.ParseUint(string(raw), 10, 64)
	return id, err == nil
}

func (m *Monitor) oldestPendingLocked() (uint64, bool) {
	var oldest uint64
	found := false
	for id := range m.pending {
		if !found || id < oldest {
			oldest, found = id, true
		}
	}
	return oldest, found
}

package process

import (
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
)

// maxBuffered bounds the output queued for one subscriber.
const maxBuffered = 4 << 20

// stallTimeout is how long output waits for a subscriber whose buffer is
// full: a client slower than the process throttles it (as a terminal
// would), but one that stops reading is dropped rather than allowed to
// block the process for ever.
const stallTimeout = 15 * time.Second

// subscriber is one stream's queue of a process's events. Each stream has
// its own, so no client misses output because another is slow.
type subscriber struct {
	mu    sync.Mutex
	queue []*processpb.ProcessEvent
	bytes int
	err   error         // set when dropped
	space chan struct{} // closed (and replaced) whenever the queue is emptied
	stall time.Duration

	wake chan struct{} // 1-buffered: something was queued
	done chan struct{} // closed when the stream stops reading
}

func newSubscriber() *subscriber {
	return &subscriber{
		space: make(chan struct{}), stall: stallTimeout,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

// push queues ev (size bytes of output), waiting while the buffer is full;
// false if the subscriber is gone or has been dropped, now or before.
func (s *subscriber) push(ev *processpb.ProcessEvent, size int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.waitSpace(size) {
		return false
	}
	s.queue = append(s.queue, ev)
	s.bytes += size
	s.notify()
	return true
}

// waitSpace waits, with s.mu held (released while waiting), until size more
// bytes fit; it drops the subscriber if the stream takes nothing for
// s.stall. An empty queue always takes the event, however large.
func (s *subscriber) waitSpace(size int) bool {
	deadline := time.Now().Add(s.stall)
	for s.err == nil && s.bytes > 0 && s.bytes+size > maxBuffered {
		left := time.Until(deadline)
		if left <= 0 {
			s.drop()
			break
		}
		space := s.space
		s.mu.Unlock()
		t := time.NewTimer(left)
		select {
		case <-space:
		case <-s.done:
		case <-t.C:
		}
		t.Stop()
		s.mu.Lock()
		if isClosed(s.done) {
			return false
		}
	}
	return s.err == nil
}

// drop gives up on the subscriber: its stream ends with the error.
func (s *subscriber) drop() {
	s.queue, s.bytes = nil, 0
	s.err = connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"client stopped reading: %d bytes of process output waited %v; connect again to follow the process", maxBuffered, s.stall))
	s.notify()
}

func (s *subscriber) notify() {
	select {
	case s.wake <- struct{}{}:
	default: // already pending
	}
}

// take returns everything queued, and the error if the subscriber was
// dropped.
func (s *subscriber) take() ([]*processpb.ProcessEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue, s.bytes = nil, 0
	close(s.space)
	s.space = make(chan struct{})
	return q, s.err
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

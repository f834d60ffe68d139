package filesystem

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	pb "github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb"
)

const (
	// defaultKeepalive is envd's ping interval when the SDK sends none.
	defaultKeepalive = 50 * time.Second
	// maxBuffered bounds a polled watcher nobody polls; the oldest
	// events are dropped first.
	maxBuffered = 10000
)

// WatchDir streams a directory's changes: first start{}, then one
// filesystem event per change, with keepalives while it is quiet.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	m := req.Msg
	w, err := s.openWatch(ctx, m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return err
	}
	defer w.Close()
	// start{} tells the SDK the watch is in place: changes after it are seen.
	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return fmt.Errorf("send start: %w", err)
	}
	interval := keepaliveInterval(req.Header())
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		var msg *pb.WatchDirResponse
		select {
		case <-ctx.Done():
			return nil // the client went away
		case <-ticker.C:
			msg = &pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}
		case e, ok := <-w.events:
			if !ok {
				return w.err
			}
			msg = &pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: e}}
			ticker.Reset(interval) // events keep the connection alive too
		}
		if err := stream.Send(msg); err != nil {
			return fmt.Errorf("send watch event: %w", err)
		}
	}
}

// keepaliveInterval reads the SDK's Keepalive-Ping-Interval (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	secs, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || secs <= 0 {
		return defaultKeepalive
	}
	return time.Duration(secs) * time.Second
}

// openWatch resolves p for the request's user and starts watching it.
func (s *Service) openWatch(ctx context.Context, p string, recursive, includeEntry, allowNetwork bool) (*dirWatch, error) {
	t, _, err := s.userTarget(ctx, p, true)
	if err != nil {
		return nil, err
	}
	if !allowNetwork && onNetworkMount(t.host) {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cannot watch %s: it is on a network filesystem", t.sandbox))
	}
	return s.startWatch(t, recursive, includeEntry)
}

// onNetworkMount reports whether host is on a filesystem whose remote
// changes inotify cannot see (envd refuses those unless asked not to).
func onNetworkMount(host string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(host, &st); err != nil {
		return false // the watch itself will report a real problem
	}
	switch uint32(st.Type) {
	case 0x6969, 0xFF534D42, 0x517B, 0xFE534D42, 0x65735546: // NFS, CIFS, SMB, SMB2, FUSE
		return true
	}
	return false
}

// polledWatch buffers a watch's events for GetWatcherEvents.
type polledWatch struct {
	w *dirWatch

	mu   sync.Mutex
	buf  []*pb.FilesystemEvent
	err  error
	done bool
}

func (p *polledWatch) collect() {
	for e := range p.w.events {
		p.mu.Lock()
		if len(p.buf) >= maxBuffered {
			p.buf = p.buf[1:]
		}
		p.buf = append(p.buf, e)
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.err, p.done = p.w.err, true
	p.mu.Unlock()
}

// drain returns the buffered events; once they are delivered, the error
// that ended the watch, if any.
func (p *polledWatch) drain() ([]*pb.FilesystemEvent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.buf
	p.buf = nil
	if len(out) == 0 && p.done && p.err != nil {
		return nil, p.err
	}
	return out, nil
}

// CreateWatcher starts a watch whose events are fetched by polling.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	m := req.Msg
	w, err := s.openWatch(ctx, m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return nil, err
	}
	p := &polledWatch{w: w}
	go p.collect()
	id := rand.Text()
	s.mu.Lock()
	s.watchers[id] = p
	s.mu.Unlock()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns (and forgets) the events since the last call.
func (s *Service) GetWatcherEvents(_ context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	p, err := s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	events, err := p.drain()
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher stops a watcher made by CreateWatcher.
func (s *Service) RemoveWatcher(_ context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	p, ok := s.watchers[id]
	delete(s.watchers, id)
	s.mu.Unlock()
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q does not exist", id))
	}
	p.w.Close()
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}

func (s *Service) watcher(id string) (*polledWatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.watchers[id]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q does not exist", id))
	}
	return p, nil
}

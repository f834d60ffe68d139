package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"

	"github.com/sandlot-dev/sandlot/guest/envd/files"
	pb "github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb"
)

// dirWatch watches one directory (and, when recursive, every directory
// below it, including ones made later) and turns fsnotify's events into
// the SDK's FilesystemEvents on events.
//
// fsnotify's own recursive mode is test-only in v1.10, so recursion is
// done here: each new subdirectory gets its own inotify watch.
type dirWatch struct {
	svc          *Service
	fsw          *fsnotify.Watcher
	dir          target
	recursive    bool
	includeEntry bool

	// events is closed when the watch ends; err then says why (nil when
	// it was closed).
	events chan *pb.FilesystemEvent
	err    error

	stop     chan struct{}
	stopOnce sync.Once
	subdirs  map[string]struct{} // host paths watched below dir; loop-owned
	// announced holds the names addTree reported as created; inotify may
	// report the same creation once the new watch is up, and that second
	// report is dropped. Loop-owned.
	announced map[string]struct{}
}

// maxAnnounced bounds announced: a tree moved into the watch is announced
// whole but never re-reported, so its names would otherwise pile up.
const maxAnnounced = 4096

// startWatch begins watching t, which must be a directory.
func (s *Service) startWatch(t target, recursive, includeEntry bool) (*dirWatch, error) {
	if err := s.checkDir(t); err != nil {
		return nil, err
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch %s: %w", t.sandbox, err))
	}
	w := &dirWatch{
		svc: s, fsw: fsw, dir: t, recursive: recursive, includeEntry: includeEntry,
		events: make(chan *pb.FilesystemEvent, 64), stop: make(chan struct{}),
		subdirs: map[string]struct{}{}, announced: map[string]struct{}{},
	}
	if err := w.addTree(t.host, false); err != nil {
		_ = fsw.Close()
		return nil, fsError("watch", t.sandbox, err)
	}
	if !s.track(w) {
		_ = fsw.Close()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("filesystem service is shutting down"))
	}
	go w.loop()
	return w, nil
}

// track registers w so Close can stop it; false once the service closed.
func (s *Service) track(w *dirWatch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.watches[w] = struct{}{}
	return true
}

func (s *Service) untrack(w *dirWatch) {
	s.mu.Lock()
	delete(s.watches, w)
	s.mu.Unlock()
}

// Close stops the watch; events is closed soon after.
func (w *dirWatch) Close() {
	w.stopOnce.Do(func() {
		close(w.stop)
		_ = w.fsw.Close()
	})
}

func (w *dirWatch) loop() {
	defer close(w.events)
	defer w.svc.untrack(w)
	defer w.Close()
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if err := w.handle(ev); err != nil {
				w.err = err
				return
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			// An overflow means events were lost: the client must know
			// its view is stale rather than silently miss changes.
			w.err = connect.NewError(connect.CodeInternal, fmt.Errorf("watch %s: %w", w.dir.sandbox, err))
			return
		}
	}
}

// handle emits one event per operation fsnotify folded into ev, then
// adjusts the watched subdirectories.
func (w *dirWatch) handle(ev fsnotify.Event) error {
	rel, err := filepath.Rel(w.dir.host, ev.Name)
	rel = filepath.ToSlash(rel)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil // not under the watched directory: nothing to report
	}
	if strings.HasPrefix(path.Base(rel), files.TempPrefix) {
		return nil // an upload in progress: its final name is reported instead
	}
	for _, op := range eventTypes(ev.Op) {
		if w.seen(rel, op) {
			continue
		}
		w.send(w.event(rel, ev.Name, op))
	}
	if !w.recursive {
		return nil
	}
	if ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Remove) {
		w.forget(ev.Name)
	}
	if ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			if err := w.addTree(ev.Name, true); err != nil {
				return fsError("watch", path.Join(w.dir.sandbox, rel), err)
			}
		}
	}
	return nil
}

// seen reports whether a create of rel was already announced, and
// forgets names that are gone so that a later re-creation is reported.
func (w *dirWatch) seen(rel string, op pb.EventType) bool {
	_, ok := w.announced[rel]
	if ok {
		delete(w.announced, rel)
	}
	return ok && op == pb.EventType_EVENT_TYPE_CREATE
}

// eventTypes lists ev's operations in envd's order.
func eventTypes(op fsnotify.Op) []pb.EventType {
	var out []pb.EventType
	for _, m := range []struct {
		op fsnotify.Op
		t  pb.EventType
	}{
		{fsnotify.Create, pb.EventType_EVENT_TYPE_CREATE},
		{fsnotify.Rename, pb.EventType_EVENT_TYPE_RENAME},
		{fsnotify.Chmod, pb.EventType_EVENT_TYPE_CHMOD},
		{fsnotify.Write, pb.EventType_EVENT_TYPE_WRITE},
		{fsnotify.Remove, pb.EventType_EVENT_TYPE_REMOVE},
	} {
		if op.Has(m.op) {
			out = append(out, m.t)
		}
	}
	return out
}

// event builds the SDK event for rel (relative to the watched directory).
func (w *dirWatch) event(rel, host string, t pb.EventType) *pb.FilesystemEvent {
	e := &pb.FilesystemEvent{Name: rel, Type: t}
	if !w.includeEntry {
		return e
	}
	if fi, err := os.Lstat(host); err == nil {
		e.Entry = w.svc.entryInfo(path.Join(w.dir.sandbox, rel), host, fi, newNames(w.svc.cfg.Root))
	}
	return e
}

// send hands e to the consumer; a slow consumer backs up into inotify's
// own queue rather than into memory here.
func (w *dirWatch) send(e *pb.FilesystemEvent) {
	select {
	case w.events <- e:
	case <-w.stop:
	}
}

// addTree watches dir and, when recursive, the directories below it. With
// announce, entries found below dir are reported as created: they were
// made before their directory's watch existed, so inotify saw nothing.
func (w *dirWatch) addTree(dir string, announce bool) error {
	if !w.recursive {
		return w.fsw.Add(dir)
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission)) {
				return nil // removed while walking, or unreadable: watch the rest
			}
			return err
		}
		if announce && p != dir && !strings.HasPrefix(d.Name(), files.TempPrefix) {
			w.announce(p)
		}
		if !d.IsDir() {
			return nil
		}
		if err := w.fsw.Add(p); err != nil {
			if p != w.dir.host && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fsnotify.ErrClosed)) {
				return filepath.SkipDir
			}
			return err
		}
		if p != w.dir.host {
			w.subdirs[p] = struct{}{}
		}
		return nil
	})
}

func (w *dirWatch) announce(host string) {
	rel, _ := filepath.Rel(w.dir.host, host)
	rel = filepath.ToSlash(rel)
	if len(w.announced) >= maxAnnounced {
		clear(w.announced)
	}
	w.announced[rel] = struct{}{}
	w.send(w.event(rel, host, pb.EventType_EVENT_TYPE_CREATE))
}

// forget drops the watches of a subdirectory that was moved or removed
// (and of everything below it). A moved directory keeps its inotify watch
// under the old name, which would report it a second time.
func (w *dirWatch) forget(host string) {
	for p := range w.subdirs {
		if p == host || strings.HasPrefix(p, host+string(filepath.Separator)) {
			_ = w.fsw.Remove(p) // already gone when the directory was deleted
			delete(w.subdirs, p)
		}
	}
}

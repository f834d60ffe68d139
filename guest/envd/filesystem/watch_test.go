package filesystem

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandlot-dev/sandlot/guest/envd/files"
	pb "github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// watchStream opens WatchDir and forwards its messages to a channel once
// start{} has arrived (so the watch is known to be in place).
func watchStream(t *testing.T, e *env, req *connect.Request[pb.WatchDirRequest]) <-chan *pb.WatchDirResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := e.client.WatchDir(ctx, req)
	must(t, err)
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first message is not start: %v %v", stream.Msg(), stream.Err())
	}
	out := make(chan *pb.WatchDirResponse, 256)
	go func() {
		defer close(out)
		for stream.Receive() {
			out <- stream.Msg()
		}
	}()
	return out
}

// waitEvent reads until an event name/type arrives, failing after 5 s.
func waitEvent(t *testing.T, ch <-chan *pb.WatchDirResponse, name string, typ pb.EventType) *pb.FilesystemEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended waiting for %s %s", typ, name)
			}
			if ev := m.GetFilesystem(); ev.GetName() == name && ev.GetType() == typ {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event for %s", typ, name)
		}
	}
}

func TestWatchDirRecursive(t *testing.T) {
	e := newEnv(t)
	home := filepath.Join(e.dir, "home/user")
	ch := watchStream(t, e, connect.NewRequest(&pb.WatchDirRequest{Path: "/home/user", Recursive: true, IncludeEntry: true}))

	write(t, filepath.Join(home, "a.txt"), "a")
	ev := waitEvent(t, ch, "a.txt", pb.EventType_EVENT_TYPE_CREATE)
	if ev.GetEntry().GetPath() != "/home/user/a.txt" {
		t.Fatalf("entry of create = %v", ev.GetEntry())
	}
	waitEvent(t, ch, "a.txt", pb.EventType_EVENT_TYPE_WRITE)

	// A subdirectory made after the watch started is watched too.
	must(t, os.Mkdir(filepath.Join(home, "sub"), 0o755))
	waitEvent(t, ch, "sub", pb.EventType_EVENT_TYPE_CREATE)
	write(t, filepath.Join(home, "sub/b.txt"), "b")
	waitEvent(t, ch, "sub/b.txt", pb.EventType_EVENT_TYPE_CREATE)
	waitEvent(t, ch, "sub/b.txt", pb.EventType_EVENT_TYPE_WRITE)

	must(t, os.Rename(filepath.Join(home, "sub/b.txt"), filepath.Join(home, "sub/c.txt")))
	waitEvent(t, ch, "sub/b.txt", pb.EventType_EVENT_TYPE_RENAME)
	waitEvent(t, ch, "sub/c.txt", pb.EventType_EVENT_TYPE_CREATE)
	must(t, os.Remove(filepath.Join(home, "sub/c.txt")))
	waitEvent(t, ch, "sub/c.txt", pb.EventType_EVENT_TYPE_REMOVE)

	// A moved directory is followed under its new name only.
	must(t, os.Rename(filepath.Join(home, "sub"), filepath.Join(home, "moved")))
	waitEvent(t, ch, "sub", pb.EventType_EVENT_TYPE_RENAME)
	waitEvent(t, ch, "moved", pb.EventType_EVENT_TYPE_CREATE)
	write(t, filepath.Join(home, "moved/d.txt"), "d")
	waitEvent(t, ch, "moved/d.txt", pb.EventType_EVENT_TYPE_CREATE)

	// mkdir -p: levels made before their watch existed are announced.
	must(t, os.MkdirAll(filepath.Join(home, "p/q/r"), 0o755))
	write(t, filepath.Join(home, "p/q/r/e.txt"), "e")
	waitEvent(t, ch, "p/q/r/e.txt", pb.EventType_EVENT_TYPE_CREATE)
}

func TestWatchDirFlatAndKeepalive(t *testing.T) {
	e := newEnv(t)
	home := filepath.Join(e.dir, "home/user")
	must(t, os.Mkdir(filepath.Join(home, "sub"), 0o755))
	req := connect.NewRequest(&pb.WatchDirRequest{Path: "/home/user"})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	ch := watchStream(t, e, req)

	write(t, filepath.Join(home, "sub/x"), "x") // not watched: not recursive
	write(t, filepath.Join(home, "y"), "y")
	timeout := time.After(5 * time.Second)
	sawY := false
	for !sawY {
		select {
		case m := <-ch:
			if ev := m.GetFilesystem(); ev != nil {
				if ev.GetName() == "sub/x" {
					t.Fatal("non-recursive watch reported a subdirectory's file")
				}
				if ev.GetEntry() != nil {
					t.Fatal("entry sent without include_entry")
				}
				sawY = sawY || ev.GetName() == "y"
			}
		case <-timeout:
			t.Fatal("no event for y")
		}
	}
	timeout = time.After(3 * time.Second)
	for {
		select {
		case m := <-ch:
			if m.GetKeepalive() != nil {
				return
			}
		case <-timeout:
			t.Fatal("no keepalive within 3 s at a 1 s interval")
		}
	}
}

func TestWatchErrorsAndClose(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	write(t, filepath.Join(e.dir, "home/user/f"), "f")
	_, err := e.client.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/missing"}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = e.client.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "f"}))
	wantCode(t, err, connect.CodeInvalidArgument)
	stream, err := e.client.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: "/missing"}))
	must(t, err)
	if stream.Receive() || connect.CodeOf(stream.Err()) != connect.CodeNotFound {
		t.Fatalf("WatchDir of a missing path: %v", stream.Err())
	}

	ch := watchStream(t, e, connect.NewRequest(&pb.WatchDirRequest{Path: "/home/user"}))
	e.svc.Close()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the stream")
	}
}

func TestPolledWatcher(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	home := filepath.Join(e.dir, "home/user")
	res, err := e.client.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/home/user", Recursive: true}))
	must(t, err)
	id := res.Msg.GetWatcherId()
	if len(id) < 16 {
		t.Fatalf("watcher id %q is not a random string", id)
	}
	write(t, filepath.Join(home, "one"), "1")
	write(t, filepath.Join(home, "two"), "2")
	seen := map[string]bool{}
	poll.Eventually(t, 5*time.Second, "CREATE events of one and two", func() error {
		got, err := e.client.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		must(t, err)
		for _, ev := range got.Msg.GetEvents() {
			key := fmt.Sprintf("%s %s", ev.GetType().String()[len("EVENT_TYPE_"):], ev.GetName())
			if seen[key] && key == "CREATE one" {
				t.Fatal("an event was delivered twice")
			}
			seen[key] = true
		}
		if !seen["CREATE one"] || !seen["CREATE two"] {
			return fmt.Errorf("events so far: %v", seen)
		}
		return nil
	})
	_, err = e.client.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id}))
	must(t, err)
	_, err = e.client.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = e.client.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
}

// TestWatchSeesUploads: an upload through /files (written aside, then
// renamed into place) reads to a watcher like an in-place write: a WRITE
// of the file's own name, and nothing about the temporary file.
func TestWatchSeesUploads(t *testing.T) {
	e := newEnv(t)
	write(t, filepath.Join(e.dir, "home/user/w.txt"), "old")
	ch := watchStream(t, e, connect.NewRequest(&pb.WatchDirRequest{Path: "/home/user"}))
	open := &identity.Store{}
	open.Set(identity.Identity{Open: true}) // /files refuses without an identity
	h := files.New(files.Config{Root: e.svc.cfg.Root, DefaultUser: "user", Identity: open})
	req := httptest.NewRequest("POST", "/files?path=w.txt", strings.NewReader("new"))
	req.Header.Set("Content-Type", "application/octet-stream")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("upload: %d %s", rec.Code, rec.Body)
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m := <-ch:
			ev := m.GetFilesystem()
			if strings.HasPrefix(ev.GetName(), files.TempPrefix) {
				t.Fatalf("watcher saw the upload's temporary file: %v", ev)
			}
			if ev.GetName() == "w.txt" && ev.GetType() == pb.EventType_EVENT_TYPE_WRITE {
				return
			}
		case <-timeout:
			t.Fatal("no WRITE event for an uploaded file")
		}
	}
}

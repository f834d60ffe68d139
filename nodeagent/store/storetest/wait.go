package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// WaitReady polls Status until Ready and returns the statuses seen, in
// order, without repeats; Failed or the timeout fail the test.
func WaitReady(t *testing.T, s store.Store, key string, timeout time.Duration) []store.RemoteState {
	t.Helper()
	var seen []store.RemoteState
	poll.Eventually(t, timeout, key+" Ready", func() error {
		st, err := s.Status(ctx, key)
		if err != nil {
			t.Fatalf("Status %s: %v", key, err)
		}
		if len(seen) == 0 || seen[len(seen)-1] != st.Remote {
			seen = append(seen, st.Remote)
		}
		switch st.Remote {
		case store.RemoteReady:
			return nil
		case store.RemoteFailed:
			t.Fatalf("%s Failed: %s", key, st.Message)
		}
		return fmt.Errorf("%+v (seen %v)", st, seen)
	})
	return seen
}

// WaitReadyQuiet is WaitReady for a node that may not know the key yet.
func WaitReadyQuiet(t *testing.T, s store.Store, key string, timeout time.Duration) store.Status {
	t.Helper()
	var st store.Status
	poll.Eventually(t, timeout, key+" Ready", func() error {
		var err error
		if st, err = s.Status(ctx, key); err == nil && st.Remote != store.RemoteReady {
			err = fmt.Errorf("%+v", st)
		}
		return err
	})
	return st
}

// TinyDisk mounts a tmpfs of size (e.g. "1m") on a temp dir for the test.
func TinyDisk(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Fatalf("mount tmpfs on %s: %v: mounting a tmpfs needs root (CAP_SYS_ADMIN): run the store tests as root, e.g. go test -exec sudo ./nodeagent/store/", dir, err)
		}
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

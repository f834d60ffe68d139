package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/guest/identity"
)

// TestWriteResolvConf: the guest's resolv.conf names the host's forwarder
// and the pod's search path; a symlink (systemd-resolved's) is replaced;
// the same content is not written again.
func TestWriteResolvConf(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	if err := os.Symlink("/run/systemd/resolve/stub-resolv.conf", path); err != nil {
		t.Fatal(err)
	}
	d := identity.DNS{Nameservers: []string{"169.254.53.53"}, Search: []string{"ns.svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5"}}
	if err := writeResolvConf(path, d); err != nil {
		t.Fatal(err)
	}
	want := "nameserver 169.254.53.53\nsearch ns.svc.cluster.local cluster.local\noptions ndots:5\n"
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Fatalf("resolv.conf = %q, %v; want %q", got, err, want)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("resolv.conf is %v, %v; want a regular file in place of the symlink", fi, err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if err := writeResolvConf(path, d); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("unchanged content was written again (mtime %v, want %v)", fi.ModTime(), old)
	}
}

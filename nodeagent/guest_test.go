package nodeagent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandlot-dev/sandlot/api/node"
)

// TestGuestDigest: the digest follows the kernel and the initramfs the
// shim config names, read under the host root; a missing one is an error.
func TestGuestDigest(t *testing.T) {
	host := t.TempDir()
	write := func(p, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(host, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := json.Marshal(node.Config{Kernel: "/var/lib/sandlot/vm/vmlinux", Initrd: "/var/lib/sandlot/vm/initramfs.cpio.gz"})
	write("/etc/sandlot/shim.json", string(cfg))
	write("/var/lib/sandlot/vm/vmlinux", "kernel 1")
	write("/var/lib/sandlot/vm/initramfs.cpio.gz", "guest agent 0.1.0")
	first, err := GuestDigest(host, "/etc/sandlot/shim.json")
	if err != nil || len(first) != 16 {
		t.Fatalf("digest %q, %v", first, err)
	}
	if again, _ := GuestDigest(host, "/etc/sandlot/shim.json"); again != first {
		t.Errorf("the same guest digests to %s, then %s", first, again)
	}
	write("/var/lib/sandlot/vm/initramfs.cpio.gz", "guest agent 0.2.0")
	if upgraded, _ := GuestDigest(host, "/etc/sandlot/shim.json"); upgraded == first {
		t.Error("a new initramfs kept the digest")
	}
	if err := os.Remove(filepath.Join(host, "/var/lib/sandlot/vm/vmlinux")); err != nil {
		t.Fatal(err)
	}
	if _, err := GuestDigest(host, "/etc/sandlot/shim.json"); err == nil {
		t.Error("a missing kernel digested")
	}
	if _, err := GuestDigest(host, "/etc/sandlot/none.json"); err == nil {
		t.Error("a missing shim config digested")
	}
}

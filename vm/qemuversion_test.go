package vm

import (
	"os"
	"testing"
)

// TestQEMUVersionIn: the QEMU of a root filesystem mounted elsewhere
// (here the host's own /, chrooted into) prints what QEMU on the PATH does.
func TestQEMUVersionIn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("chroot needs root: run the tests as root")
	}
	want, err := QEMUVersion("")
	if err != nil {
		t.Fatalf("%v: install qemu-system-x86", err)
	}
	got, err := QEMUVersionIn("/", "")
	if err != nil || got != want {
		t.Fatalf("QEMUVersionIn(/) = %q, %v; want %q", got, err, want)
	}
	if _, err := QEMUVersionIn(t.TempDir(), ""); err == nil {
		t.Fatal("an empty root has no QEMU, yet a version came back")
	}
}

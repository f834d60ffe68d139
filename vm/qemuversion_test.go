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

// TestRootCommand: a program is found in the other root's PATH and run
// there; one that root lacks is a clear error.
func TestRootCommand(t *testing.T) {
	root := t.TempDir()
	if _, err := RootCommand(root, "qemu-system-x86_64"); err == nil {
		t.Fatal("found a program in an empty root")
	}
	cmd, err := RootCommand("/", "sh", "-c", "echo $PATH")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil || len(out) == 0 {
		t.Fatalf("sh in / : %q, %v", out, err)
	}
}

package vm

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDirRefusesWhatTheVMPlants: each operation of a Dir on a link the
// VM's uid planted refuses it or acts on the link itself, never on the
// root-owned file it points to.
func TestDirRefusesWhatTheVMPlants(t *testing.T) {
	s := newScene(t)
	dir := s.vmDir("run")
	s.mustAttack(dir, `mkdir sub; ln -s "$CANARY" link; ln -s .. up; ln -s "$(dirname "$CANARY")" out; echo mine > mine`)
	s.plant(dir, "hard", "hard link")
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	_, err = d.Open("link")
	refusedAs(t, err, "symlink")
	_, err = d.Open("out/canary")
	refusedAs(t, err, "symlink")
	_, err = d.Open("up/canary")
	refusedAs(t, err, "symlink")
	_, err = d.Open("../canary")
	refusedAs(t, err, "path")
	_, err = d.Open("hard")
	refusedAs(t, err, "hard link")
	_, err = d.Stat("link")
	refusedAs(t, err, "symlink")
	_, err = d.Create("link", 0o600)
	refusedAs(t, err, "symlink")
	refusedAs(t, d.Chown("link", 0, 0), "symlink")
	refusedAs(t, d.Chown("hard", attackerUID, attackerUID), "hard link")
	refusedAs(t, d.Chmod("hard", 0o666), "hard link")
	refusedAs(t, d.Chmod("out/canary", 0o666), "symlink")
	_, err = d.OpenOwned("mine")
	if err != nil {
		t.Fatalf("the VM's own file: %v", err)
	}
	s.checkCanary()

	// Rename and Remove act on the entry: the link moves or goes.
	if err := d.Rename("link", "link.1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("link.1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("hard"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("out/canary"); err == nil {
		t.Fatal("Remove took a path through a symlink")
	}
	f, err := d.Replace("mine", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	s.checkCanary()
}

// TestOpenDirRefusesSymlink: the directory itself is opened without
// following a link.
func TestOpenDirRefusesSymlink(t *testing.T) {
	s := newScene(t)
	dir := s.vmDir("run")
	s.mustAttack(dir, `ln -s "$(dirname "$CANARY")" elsewhere`)
	_, err := OpenDir(filepath.Join(dir, "elsewhere"))
	refusedAs(t, err, "symlink")
}

// TestDirChownByFD: Chown and Chmod change the file opened beneath the
// directory, and the directory's new owner is the one OpenOwned expects.
func TestDirChownByFD(t *testing.T) {
	s := newScene(t)
	dir := filepath.Join(s.base, "fresh")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := d.Create("file", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := d.OpenOwned("file"); err != nil {
		t.Fatalf("root's file in root's directory: %v", err)
	}
	for _, n := range []string{".", "file"} {
		if err := d.Chown(n, attackerUID, attackerUID); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Chmod("file", 0o640); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(dir, "file"), &st); err != nil || st.Uid != attackerUID || st.Mode&0o777 != 0o640 {
		t.Fatalf("file: uid %d mode %o (%v)", st.Uid, st.Mode&0o777, err)
	}
	if _, err := d.OpenOwned("file"); err != nil {
		t.Fatalf("the VM's file in its directory: %v", err)
	}
}

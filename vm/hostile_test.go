package vm

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/api/snapshot"
)

// hostileVM is a VM as a jailed QEMU leaves it: its run, disk and RAM
// directories are the attacker's, with the files QEMU writes or was given
// in them (the device state it saved, its layer, its RAM), the attacker's
// own. No QEMU runs: the code under test is what root does with them.
func hostileVM(s *scene) *VM {
	s.t.Helper()
	run, disk, mem := s.vmDir("run"), s.vmDir("disk"), s.vmDir("mem")
	s.mustAttack(run, `printf 'device state' > `+stateSaving)
	s.mustAttack(disk, `truncate -s 1M layer.raw; printf 'layer data' | dd of=layer.raw conv=notrunc 2>/dev/null`)
	s.mustAttack(mem, `truncate -s 1M ram; printf 'guest RAM' | dd of=ram bs=4096 seek=3 conv=notrunc 2>/dev/null`)
	cfg := Config{Name: "hostile", RunDir: run, DiskDir: disk}
	v := &VM{cfg: cfg, spec: cfg.baseSpec(), state: Running}
	v.spec.MemoryPath, v.spec.SharedMemory, v.spec.Accel = filepath.Join(mem, "ram"), true, AccelTCG
	return v
}

func (s *scene) snapshotDir() string {
	s.t.Helper()
	dir, err := os.MkdirTemp(s.base, "snap-")
	if err != nil {
		s.t.Fatal(err)
	}
	return dir
}

// TestSnapshotRefusesPlantedFiles: the files a snapshot copies out of the
// VM's directories (device state, RAM, writable layer), each replaced by
// a symlink or hard link to root's canary, a FIFO, or a file of root's:
// the snapshot is refused, nothing of the canary is copied, the canary is
// unchanged, and a FIFO does not hang it.
func TestSnapshotRefusesPlantedFiles(t *testing.T) {
	files := map[string]func(v *VM) string{
		stateSaving: func(v *VM) string { return v.cfg.RunDir },
		"ram":       func(v *VM) string { return filepath.Dir(v.spec.MemoryPath) },
		"layer.raw": func(v *VM) string { return v.diskDir() },
	}
	kinds := map[string]string{"symlink": "symlink", "hard link": "hard link", "named pipe": "named pipe",
		"root's file": "file of uid 0"}
	for name, dirOf := range files {
		for kind, what := range kinds {
			t.Run(name+"/"+kind, func(t *testing.T) {
				s := newScene(t)
				v := hostileVM(s)
				s.plant(dirOf(v), name, kind)
				snap := s.snapshotDir()
				done := make(chan error, 1)
				go func() { done <- v.saveFiles(snap, &snapshot.Manifest{}) }()
				select {
				case err := <-done:
					refusedAs(t, err, what)
				case <-time.After(10 * time.Second):
					t.Fatal("the snapshot hangs on what was planted")
				}
				noCanaryIn(t, snap)
				s.checkCanary()
			})
		}
	}
}

// TestSnapshotTakesTheVMsOwnFiles: the same directories with nothing
// planted: the VM's own files (its uid's) are copied.
func TestSnapshotTakesTheVMsOwnFiles(t *testing.T) {
	s := newScene(t)
	v := hostileVM(s)
	snap := s.snapshotDir()
	m := &snapshot.Manifest{}
	if err := v.saveFiles(snap, m); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{snapshot.StateFile: "device state", snapshot.DiskFile: "layer data", snapshot.MemoryFile: "guest RAM"} {
		if b, err := os.ReadFile(filepath.Join(snap, name)); err != nil || !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: %v, want %q in it", name, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(v.cfg.RunDir, stateSaving)); !os.IsNotExist(err) {
		t.Errorf("the saved state was left in the run directory: %v", err)
	}
}

// TestLogsStepOverPlantedLinks: QEMU's log and the console log, whose
// names the VM can replace between root's writes, are created anew
// (never written through a link), rotated by renaming the entry, and read
// for errors only as the VM's regular files with one link.
func TestLogsStepOverPlantedLinks(t *testing.T) {
	s := newScene(t)
	v := hostileVM(s)
	s.plant(v.cfg.RunDir, "qemu.log", "symlink")
	w, err := openLogWriter(qemuLogPath(v.cfg.RunDir), 100)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("qemu: first words\n"))
	s.plant(v.cfg.RunDir, "qemu.log", "symlink") // after it opened: the next rotation must not follow it
	_, _ = w.Write(bytes.Repeat([]byte("x"), 250))
	_ = w.Close()
	s.checkCanary()

	c := &cappedLog{path: v.spec.Console, max: 64}
	_ = c.write([]byte("console line\n"))
	s.plant(v.diskDir(), "console.log", "symlink")
	_ = c.write(bytes.Repeat([]byte("y"), 200))
	c.close()
	s.checkCanary()

	// The error paths read the logs: links planted there stay unread.
	s.plant(v.cfg.RunDir, "qemu.log", "symlink")
	s.plant(v.cfg.RunDir, "qemu.log.1", "hard link")
	s.plant(v.diskDir(), "console.log", "named pipe")
	s.plant(v.diskDir(), "console.log.1", "symlink")
	for what, tail := range map[string]string{"qemu log": v.qemuLog(), "console": string(consoleTail(v.spec.Console))} {
		if strings.Contains(tail, "secret") {
			t.Errorf("the %s tail quotes the canary: %q", what, tail)
		}
	}
	s.checkCanary()
}

// TestLogTailOfAHugeFile: a log the VM replaced with a sparse file of
// 64 GiB costs root its last bytes only, not 64 GiB of memory.
func TestLogTailOfAHugeFile(t *testing.T) {
	s := newScene(t)
	run := s.vmDir("run")
	s.mustAttack(run, `truncate -s 64G qemu.log; echo 'the end' >> qemu.log`)
	if got := logTail(qemuLogPath(run), 100); len(got) != 100 || !strings.HasSuffix(string(got), "the end\n") {
		t.Fatalf("tail: %d bytes ending %q", len(got), got[max(0, len(got)-10):])
	}
}

// TestLayerAndHandOverRefusePlantedLinks: a writable layer about to be
// created (cold boot: formatted by mkfs; restore: copied into) or handed
// to the VM's uid is refused where a link stands in its place: the
// canary is neither formatted, written nor chowned.
func TestLayerAndHandOverRefusePlantedLinks(t *testing.T) {
	s := newScene(t)
	v := hostileVM(s)
	s.plant(v.diskDir(), "layer.raw", "symlink")
	refusedAs(t, makeLayer(v.spec.Layer, 16), "symlink")
	src := filepath.Join(s.base, "snapshot-disk")
	if err := os.WriteFile(src, []byte("snapshot's disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	refusedAs(t, v.restoreLayer(src, nil), "symlink")
	s.checkCanary()

	v.cfg.Jail = &Jail{UID: attackerUID, GID: attackerUID, SharedGID: attackerUID}
	_, _, err := v.jailFiles()
	refusedAs(t, err, "symlink")
	s.plant(v.diskDir(), "layer.raw", "hard link")
	_, _, err = v.jailFiles()
	refusedAs(t, err, "hard link")
	s.mustAttack(v.diskDir(), `rm -f layer.raw; touch layer.raw`)
	s.plant(filepath.Dir(v.spec.MemoryPath), "ram", "symlink")
	_, _, err = v.jailFiles()
	refusedAs(t, err, "symlink")
	s.checkCanary()
}

// TestSocketsRefusePlantedLinks: QMP and the control channel are dialled
// beneath the run directory: a symlink there to a host socket (root's,
// outside) is refused, and that socket never sees a connection.
func TestSocketsRefusePlantedLinks(t *testing.T) {
	s := newScene(t)
	v := hostileVM(s)
	hostSock := filepath.Join(s.base, "host.sock")
	ln, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	s.mustAttack(v.cfg.RunDir, `ln -s "`+hostSock+`" qmp.sock; touch control.sock`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = v.dialQMP(ctx)
	refusedAs(t, err, "symlink")
	refusedAs(t, v.dialControl(ctx), "regular file")
	select {
	case <-accepted:
		t.Fatal("root connected to the host's socket through the VM's link")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestStopRemovesLinksNotTargets: Stop (and the shim's cleanup, the same
// os.RemoveAll) removes what the VM planted, not what it points to.
func TestStopRemovesLinksNotTargets(t *testing.T) {
	s := newScene(t)
	v := hostileVM(s)
	outside := filepath.Join(s.base, "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.mustAttack(v.cfg.RunDir, `ln -s "`+outside+`" dir; mkdir sub; ln -s "`+outside+`/keep" sub/keep`)
	s.plant(v.diskDir(), "layer.raw", "symlink")
	s.plant(v.diskDir(), "console.log", "hard link")
	if err := v.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range v.OwnedPaths() {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(b) != "keep" {
		t.Fatalf("a file outside the VM's directories: %q, %v", b, err)
	}
	s.checkCanary()
}

// TestStagingIsOutsideTheVMsDirectories: a snapshot assembled before it
// moves into a FUSE store is staged where QEMU cannot write: not in its
// run, disk or RAM directory, in a root-only directory beside them.
func TestStagingIsOutsideTheVMsDirectories(t *testing.T) {
	s := newScene(t)
	v := hostileVM(s)
	stage, err := v.makeStage()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{v.cfg.RunDir, v.diskDir(), filepath.Dir(v.spec.MemoryPath)} {
		if rel, err := filepath.Rel(d, stage); err == nil && !strings.HasPrefix(rel, "..") {
			t.Errorf("staging %s is inside %s, which QEMU can write", stage, d)
		}
	}
	for _, p := range []string{stage, filepath.Dir(stage)} {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil || st.Uid != 0 || st.Mode&0o022 != 0 {
			t.Errorf("%s: uid %d mode %o (%v): want root's, writable by root only", p, st.Uid, st.Mode&0o777, err)
		}
	}
}

// TestGuestAgentVersion: what a guest says its agent's version is goes
// into the Sandbox's status only when it looks like one.
func TestGuestAgentVersion(t *testing.T) {
	for in, want := range map[string]string{
		"0.2.0-dev":                       "0.2.0-dev",
		"1.0.0+build.7":                   "1.0.0+build.7",
		"":                                "",
		strings.Repeat("9", 65):           "",
		strings.Repeat("1", 16<<20):       "",
		"0.2.0\x1b[31m":                   "",
		"0.2.0 (a guest that lies)":       "",
		"-rf":                             "",
		"0.2.0\nguestVersion: forged-too": "",
	} {
		if got := guestAgentVersion(in); got != want {
			t.Errorf("guestAgentVersion(%.40q) = %q, want %q", in, got, want)
		}
	}
}

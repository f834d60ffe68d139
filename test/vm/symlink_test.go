package vmtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/vm"
)

// TestSnapshotRefusesPlantedLinks plays a guest that escaped into its
// jailed QEMU: code as the VM's uid, in QEMU's own mount namespace. It
// replaces the VM's writable layer, then its RAM file, with a symlink to a
// root-owned canary outside the jail, and each snapshot (root, in the
// host's namespace, where the link would resolve) is refused: the canary
// keeps its content, owner and mode, and the VM runs on. With the links
// gone, the VM snapshots again.
func TestSnapshotRefusesPlantedLinks(t *testing.T) {
	env := loadEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g := guest(t, "planted", "10.0.2.15", 43)
	uid := jailFirstUID + 2
	cfg := jailed(t, config(t, g, env.Debian), uid)
	v, err := vm.Boot(ctx, env.Assets, cfg, g.Identity)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	if err := g.WaitHealth(ctx); err != nil {
		t.Fatal(err)
	}
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, []byte("root's secret\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	want := canaryState(t, canary)
	asQEMU := func(dir, script string) {
		t.Helper()
		if out, err := asEscapedQEMU(v.PID(), uid, dir, script, canary); err != nil {
			t.Fatalf("as the VM's uid in its jail: %s: %v: %s", script, err, out)
		}
	}
	for _, file := range []string{filepath.Join(cfg.DiskDir, "layer.raw"), v.RAMFile()} {
		dir, name := filepath.Dir(file), filepath.Base(file)
		asQEMU(dir, fmt.Sprintf(`mv %[1]s %[1]s.orig; ln -s "$CANARY" %[1]s`, name))
		snap := filepath.Join(t.TempDir(), "snap")
		_, err := v.Snapshot(ctx, snap)
		if !errors.Is(err, vm.ErrRefused) || !strings.Contains(err.Error(), "refusing symlink at "+file) {
			t.Errorf("snapshot with %s a symlink to root's canary: want it refused, got %v", file, err)
		} else {
			t.Logf("refused: %v", err)
		}
		if _, err := os.Stat(snap); !os.IsNotExist(err) {
			t.Errorf("the refused snapshot left %s (%v)", snap, err)
		}
		if got := canaryState(t, canary); got != want {
			t.Fatalf("the canary changed: %+v, was %+v", got, want)
		}
		if got := run(t, ctx, g, "echo ok"); got != "ok" {
			t.Fatalf("the VM after the refused snapshot: %q", got)
		}
		asQEMU(dir, fmt.Sprintf(`rm %[1]s; mv %[1]s.orig %[1]s`, name))
	}
	if _, err := v.Snapshot(ctx, filepath.Join(t.TempDir(), "snap")); err != nil {
		t.Fatalf("snapshot with the links gone: %v", err)
	}
}

type canaryFile struct {
	content   string
	uid, mode uint32
}

func canaryState(t *testing.T, p string) canaryFile {
	t.Helper()
	b, err := os.ReadFile(p)
	var st syscall.Stat_t
	if err == nil {
		err = syscall.Lstat(p, &st)
	}
	if err != nil {
		t.Fatalf("canary: %v", err)
	}
	return canaryFile{content: string(bytes.Clone(b)), uid: st.Uid, mode: st.Mode}
}

// asEscapedQEMU runs a shell script where an escaped QEMU runs: chrooted
// into QEMU's jail (its root, /proc/<pid>/root), as its uid, in dir (the
// VM's directories are at their host paths there). $CANARY names root's
// file, which the jail does not hold: only root, outside, could follow a
// link to it.
func asEscapedQEMU(pid, uid int, dir, script, canary string) ([]byte, error) {
	cmd := exec.Command("/bin/sh", "-ec", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "CANARY=" + canary}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: fmt.Sprintf("/proc/%d/root", pid),
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	return cmd.CombinedOutput()
}

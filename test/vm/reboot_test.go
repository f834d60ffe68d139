package vmtest_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/vm"
)

// TestRebootKeepsTheDisk: a VM booted on a pause package's disk (E2B's
// filesystem-only pause) has the files written before the pause (the
// pause has the guest write them back first), not its processes or
// memory, and can be snapshotted again.
func TestRebootKeepsTheDisk(t *testing.T) {
	env := loadEnv(t)
	snap, bootID := snapshotOfParent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	v, g := restoreClone(t, ctx, snap, "before", "10.0.2.60", 60)
	sum := run(t, ctx, g, "head -c 1M /dev/urandom > /home/user/kept && sha256sum /home/user/kept")
	run(t, ctx, g, "sleep 600 >/dev/null 2>&1 & echo $! > /home/user/sleeper")
	// As a pause package is taken: the VM stopped first, then saved.
	if err := v.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(t.TempDir(), "disk")
	if _, err := v.Snapshot(ctx, disk); err != nil {
		t.Fatal(err)
	}
	v.Stop()

	g2 := guest(t, "rebooted", "10.0.2.61", 61)
	start := time.Now()
	v2, err := vm.Reboot(ctx, env.Assets, config(t, g2, ""), disk, g2.Identity, env.Roots())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v2.Stop() })
	if err := g2.WaitHealth(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("booted on the snapshot's disk in %v", time.Since(start))
	if got := run(t, ctx, g2, "sha256sum /home/user/kept"); got != sum {
		t.Fatalf("file after the reboot: %q, want %q", got, sum)
	}
	if got := run(t, ctx, g2, "cat /proc/sys/kernel/random/boot_id"); got == strings.TrimSpace(bootID) {
		t.Fatal("the guest did not boot: it has the snapshot's boot ID")
	}
	if got := run(t, ctx, g2, `kill -0 "$(cat /home/user/sleeper)" 2>/dev/null && echo alive || echo gone`); got != "gone" {
		t.Fatalf("a process from before the pause: %s", got)
	}
	if _, err := v2.Snapshot(ctx, filepath.Join(t.TempDir(), "again")); err != nil {
		t.Fatalf("snapshot of a rebooted VM: %v", err)
	}
}

package vmtest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/vm"
)

// Jailed VMs of this package run as these ids (above any distribution's
// allocations; nothing on the test machine owns them).
const (
	jailSharedGID = 370000
	jailFirstUID  = 370001
)

func jailed(t *testing.T, cfg vm.Config, uid int) vm.Config {
	cfg.Jail = &vm.Jail{UID: uid, GID: uid, SharedGID: jailSharedGID}
	cfg.DiskDir = filepath.Join(t.TempDir(), "disk")
	return cfg
}

// TestJailedVMs: a booted and a restored VM, each jailed, run as their own
// uid with no capabilities in a mount namespace of their own that holds
// their files and not the other's; both still answer.
func TestJailedVMs(t *testing.T) {
	env := loadEnv(t)
	snap, _ := snapshotOfParent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := guest(t, "jailboot", "10.0.2.15", 40)
	booted, err := vm.Boot(ctx, env.Assets, jailed(t, config(t, g, env.Debian), jailFirstUID), g.Identity)
	if err != nil {
		t.Fatal(err)
	}
	defer booted.Stop()
	if err := g.WaitHealth(ctx); err != nil {
		t.Fatal(err)
	}
	cg := guest(t, "jailclone", "10.0.2.16", 41)
	restored, err := vm.Restore(ctx, "", jailed(t, config(t, cg, ""), jailFirstUID+1), snap, cg.Identity, env.Roots())
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Stop()
	if err := cg.WaitHealth(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, ctx, cg, "echo ok"); got != "ok" {
		t.Fatalf("jailed clone: %q", got)
	}
	checkJail(t, booted, jailFirstUID, restored.RAMFile())
	checkJail(t, restored, jailFirstUID+1, booted.RAMFile())
}

// checkJail looks at QEMU the way an escaped guest would find itself.
func checkJail(t *testing.T, v *vm.VM, uid int, others ...string) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", v.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", uid, uid, uid, uid), "CapEff:\t0000000000000000",
		"CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("qemu %d: no %q in its status:\n%s", v.PID(), want, status)
		}
	}
	mine, _ := os.Readlink("/proc/self/ns/mnt")
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", v.PID()))
	if err != nil || theirs == mine {
		t.Errorf("qemu %d: mount namespace %q (%v), the host's is %q", v.PID(), theirs, err, mine)
	}
	root := fmt.Sprintf("/proc/%d/root", v.PID())
	if _, err := os.Stat(root + v.RAMFile()); err != nil {
		t.Errorf("qemu %d cannot see its own RAM file: %v", v.PID(), err)
	}
	for _, p := range append(others, "/etc/shadow", "/etc/passwd", "/proc/1", "/sys/fs/cgroup", "/dev/net/tun", "/dev/kvm") {
		if _, err := os.Stat(root + p); !os.IsNotExist(err) {
			t.Errorf("qemu %d sees %s (%v): its root should hold only its own files", v.PID(), p, err)
		}
	}
}

package bare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
)

// GuestIP is the address the floor's snapshot keeps (each clone has its
// own user-mode network, so clones do not collide).
const GuestIP = "10.0.2.15"

// Snapshot makes a floor snapshot under dir and returns its directory:
// the default sandbox rootfs (make vm-assets builds its base disk and the
// default sandbox image from one tree) booted cold with 1 vCPU and
// 256 MiB as the benchmarks' templates, envd answering and the code
// interpreter warm (as bench-vm's parent), saved with its network kept
// (what a bare QEMU snapshot holds); the parent is stopped.
func Snapshot(ctx context.Context, dir string) (string, error) {
	env, err := vmtest.LoadEnv()
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("floor-parent-%d", os.Getpid()) // its RAM file's name under /dev/shm
	g, err := vmtest.NewGuest(name, GuestIP, 1)
	if err != nil {
		return "", fmt.Errorf("floor snapshot: %w", err)
	}
	cfg := vm.Config{Name: name, RunDir: filepath.Join(dir, "parent"), BaseDisk: env.Debian, Net: g.Net,
		VCPU: 1, MemoryMiB: 256, LayerMiB: 512}
	v, err := vm.Boot(ctx, env.Assets, cfg, g.Identity)
	if err != nil {
		return "", fmt.Errorf("floor snapshot: %w", err)
	}
	defer v.Stop()
	if err := g.WaitHealth(ctx); err != nil {
		return "", fmt.Errorf("floor snapshot: %w", err)
	}
	if _, err := g.RunCode(ctx, "1+1"); err != nil {
		return "", fmt.Errorf("floor snapshot: warm the interpreter: %w", err)
	}
	snap := filepath.Join(dir, "snapshot")
	if _, err := v.SnapshotWith(ctx, snap, vm.SnapshotOptions{KeepNetwork: true}); err != nil {
		return "", fmt.Errorf("floor snapshot: %w", err)
	}
	return snap, nil
}

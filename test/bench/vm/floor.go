package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandlot-dev/sandlot/test/bench/sbxbench"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
	"github.com/sandlot-dev/sandlot/vm"
	"github.com/sandlot-dev/sandlot/vm/qmp"
)

// bare is a clone started with the bare QEMU sequence: the same command
// line and device state, no manifest checks, no memory layer, no
// identity push (the guest keeps the snapshot's address).
type bare struct {
	cmd *exec.Cmd
	dir string
}

func (f *bare) stop() {
	f.cmd.Process.Kill()
	f.cmd.Wait()
	os.RemoveAll(f.dir)
}

// bareRestore is the floor: QEMU with -incoming defer mapping the
// snapshot's memory copy-on-write, getfd + migrate-incoming fd:, cont.
// The disk copy is made before the clock starts.
func (b *bench) bareRestore(ctx context.Context, snap string, g vmtest.Guest) (*bare, time.Duration, error) {
	m, err := vm.ReadManifest(snap)
	if err != nil {
		return nil, 0, err
	}
	dir := filepath.Join(b.dir, fmt.Sprint("bare", b.next()))
	os.MkdirAll(dir, 0o700)
	layer := filepath.Join(dir, "disk.raw")
	if out, err := exec.Command("cp", "--sparse=always", filepath.Join(snap, vm.DiskFile), layer).CombinedOutput(); err != nil {
		return nil, 0, fmt.Errorf("cp: %v: %s", err, out)
	}
	os.Chmod(layer, 0o600)
	spec := vm.Spec{Name: "bare", Accel: m.Accel, VCPU: m.VCPU, MemoryMiB: m.MemoryMiB, MemoryPath: filepath.Join(snap, vm.MemoryFile),
		BaseDisk: m.BaseDisk.Path, Layer: layer, QMPSocket: filepath.Join(dir, "qmp.sock"), ControlSocket: filepath.Join(dir, "ctl.sock"),
		Net: g.Net, Incoming: true, Sandbox: true}
	args, err := spec.Args()
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	f := &bare{cmd: exec.Command("qemu-system-x86_64", args...), dir: dir}
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := f.cmd.Start(); err != nil {
		return nil, 0, err
	}
	if err := loadBare(ctx, spec.QMPSocket, filepath.Join(snap, vm.StateFile)); err != nil {
		f.stop()
		return nil, 0, err
	}
	if err := g.WaitHealth(ctx); err != nil {
		f.stop()
		return nil, 0, err
	}
	return f, time.Since(start), nil
}

func loadBare(ctx context.Context, sock, state string) error {
	mon, err := qmp.Dial(ctx, sock)
	if err != nil {
		return err
	}
	defer mon.Close()
	if err := mon.SetMigrationCapabilities(ctx, map[string]bool{"x-ignore-shared": true}); err != nil {
		return err
	}
	st, err := os.Open(state)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := mon.SendFD(ctx, "st", st); err != nil {
		return err
	}
	if err := mon.MigrateIncoming(ctx, "fd:st"); err != nil {
		return err
	}
	if _, err := mon.WaitMigration(ctx); err != nil {
		return err
	}
	return mon.Cont(ctx)
}

// floorRestore is one bare restore of the floor's snapshot on its own
// address (10.0.2.15).
func (b *bench) floorRestore(ctx context.Context) (*bare, time.Duration, error) {
	g, err := vmtest.NewGuest("bare", "10.0.2.15", 2000)
	if err != nil {
		return nil, 0, err
	}
	return b.bareRestore(ctx, b.floorSnap, g)
}

// bareConcurrent starts n bare restores of the floor's snapshot at once
// (each on its own user-mode network) and measures the wall time until
// every guest answered: the floor a batch of n sandbox starts (a fork of
// n, n creates at once) is read against.
func (b *bench) bareConcurrent(ctx context.Context, n int) error {
	var mu sync.Mutex
	var clones []*bare
	var errs []error
	defer func() {
		for _, c := range clones {
			c.stop()
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			g, err := vmtest.NewGuest("bare", "10.0.2.15", 4000+i)
			var c *bare
			if err == nil {
				c, _, err = b.bareRestore(ctx, b.floorSnap, g)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			clones = append(clones, c)
		})
	}
	wg.Wait()
	wall := ms(time.Since(start))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%d of %d bare restores at once failed: %w", len(errs), n, err)
	}
	b.add(sbxbench.FloorConcurrentRow(n), "ms", []float64{wall}, fmt.Sprintf("%.2f restores/s", float64(n)/wall*1000))
	return nil
}

// cpuTicks is utime+stime of pid in clock ticks.
func cpuTicks(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	fields := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	k, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + k
}

// pssMiB is a process's proportional set size.
func pssMiB(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Pss:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// memAvailableMiB is the host's MemAvailable.
func memAvailableMiB() float64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

package vm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/api/snapshot"
)

// Snapshot saves the VM into dir (which must not exist) and lets it run
// on. The guest syncs its disks first; then, paused: the device state
// (no RAM), the RAM — a first-generation VM's whole RAM file, or only the
// pages a restored VM changed over its base — and the writable layer.
// Checksums and the manifest are written after the VM runs again (the
// data is made durable in the background after that).
func (v *VM) Snapshot(ctx context.Context, dir string) (*snapshot.Manifest, error) {
	return v.SnapshotWith(ctx, dir, SnapshotOptions{})
}

// SnapshotOptions change what Snapshot does.
type SnapshotOptions struct {
	// KeepNetwork keeps a first-generation VM's network in its snapshot
	// (see prepareGuest): what a bare QEMU snapshot holds, for a restore
	// that pushes no identity.
	KeepNetwork bool
}

// SnapshotWith is Snapshot with options.
func (v *VM) SnapshotWith(ctx context.Context, dir string, o SnapshotOptions) (*snapshot.Manifest, error) {
	v.ops.Lock()
	defer v.ops.Unlock()
	if st := v.State(); st != Running && st != Paused {
		return nil, fmt.Errorf("snapshot %s: VM is %s", v.cfg.Name, st)
	}
	// Guest memory holds the sandbox's secrets: only root reads a snapshot.
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", v.cfg.Name, err)
	}
	m, err := v.snapshot(ctx, dir, o)
	if err != nil {
		_ = os.RemoveAll(dir) // never leave a half-written snapshot
		return nil, fmt.Errorf("snapshot %s: %w", v.cfg.Name, err)
	}
	return m, nil
}

func (v *VM) snapshot(ctx context.Context, dir string, o SnapshotOptions) (*snapshot.Manifest, error) {
	wasRunning := v.State() == Running
	dropped, err := v.prepareGuest(ctx, wasRunning, v.base == nil && !o.KeepNetwork)
	if err != nil {
		return nil, err
	}
	// On a FUSE store (JuiceFS) writing while paused runs at the
	// filesystem's pace (0.8-1 s for an idle VM's files): the VM's files
	// are written beside it on the node and moved in once it runs again.
	target, staged, err := v.stagingFor(dir)
	if err != nil {
		return nil, err
	}
	if staged {
		defer os.RemoveAll(target)
	}
	m, err := v.save(ctx, target, wasRunning)
	if dropped {
		if rerr := v.restoreNetwork(ctx); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return nil, err
	}
	if err := v.seal(target, m); err != nil {
		return nil, err
	}
	if staged {
		if err := publishSnapshot(target, dir, m); err != nil {
			return nil, err
		}
	}
	go syncLater(dir) // restorable here now; on disk shortly (a host crash is what the store's remote copy is for)
	return m, nil
}

// stagingFor is where a snapshot into dir is written while the VM is
// paused: dir itself, or the VM's staging directory when dir is on a
// FUSE mount.
func (v *VM) stagingFor(dir string) (string, bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.FUSE_SUPER_MAGIC {
		return dir, false, nil
	}
	stage, err := v.makeStage()
	if err != nil {
		return "", false, err
	}
	return stage, true, nil
}

// stageDir is where a snapshot is assembled before it moves into a FUSE
// store: beside the run directory (on the node, like it), not in it —
// QEMU can write its run directory, and could swap a staging directory
// there for a link root would then write through and publish from.
func (v *VM) stageDir() string { return v.cfg.RunDir + ".snapshot" }

// makeStage makes an empty staging directory, root's only (snapshots
// are serialised by v.ops: one at a time).
func (v *VM) makeStage() (string, error) {
	stage := v.stageDir()
	if err := os.RemoveAll(stage); err != nil { // a crashed snapshot's
		return "", fmt.Errorf("staging directory: %w", err)
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		return "", fmt.Errorf("staging directory: %w", err)
	}
	return stage, nil
}

// publishSnapshot moves a sealed snapshot from its staging directory into
// dir: the data files (sparse ones by their extents), then the manifest,
// whose presence means complete.
func publishSnapshot(stage, dir string, m *snapshot.Manifest) error {
	extents := map[string][][2]int64{snapshot.DiskFile: m.DiskExtents}
	if m.MemoryLayer != nil {
		extents[snapshot.LayerFile] = snapshot.LayerExtents(m.LayerRuns)
	}
	for _, name := range []string{snapshot.StateFile, snapshot.DiskFile, snapshot.MemoryFile, snapshot.LayerFile} {
		src := filepath.Join(stage, name)
		if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if _, err := copyExtents(src, filepath.Join(dir, name), 0o400, extents[name]); err != nil {
			return fmt.Errorf("move %s into the store: %w", name, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(stage, snapshot.ManifestFile))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, snapshot.ManifestFile), b, 0o400); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncLater writes a sealed snapshot's files to disk, off the snapshot's
// path: fsync of ~20-100 MiB costs 50-300 ms on these disks.
func syncLater(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if f, err := os.Open(filepath.Join(dir, e.Name())); err == nil {
			_ = f.Sync()
			f.Close()
		}
	}
	_ = syncDir(dir)
}

// save stops a running VM, saves it and lets it run on.
func (v *VM) save(ctx context.Context, dir string, wasRunning bool) (*snapshot.Manifest, error) {
	m, err := v.newManifest()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if wasRunning {
		if err := v.qmpErr(v.qmp.Stop(ctx), "stop"); err != nil {
			return nil, err
		}
	}
	saveErr := v.saveWhilePaused(ctx, dir, m)
	if wasRunning {
		// Whatever happened to the caller, the VM runs on.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := v.qmpErr(v.qmp.Cont(ctx), "cont"); err != nil && saveErr == nil {
			saveErr = err
		}
	}
	m.PausedNanos = time.Since(start).Nanoseconds()
	return m, saveErr
}

// prepareGuest has a running guest sync its disks. A first-generation
// VM (a template's builder) also drops its network: its clones then only
// add theirs, which under TCG saves each restore the guest's costly
// removal of the parent's; restoreNetwork gives the parent its network
// back once it runs again.
func (v *VM) prepareGuest(ctx context.Context, running, dropNetwork bool) (networkDropped bool, err error) {
	if !running || v.ctl == nil {
		return false, nil
	}
	r, err := v.ctl.PrepareSnapshot(ctx, dropNetwork)
	if err != nil {
		return false, v.qmpErr(err, "quiesce guest")
	}
	return r.NetworkDropped, nil
}

// syncGuestTimeout bounds the flush before a pause: a wedged guest is
// paused anyway (its disk then holds what it last wrote back).
const syncGuestTimeout = 5 * time.Second

// syncGuest has a running guest write its disks back before its vCPUs
// stop, best effort: a pause package's disk is then what the guest wrote
// (a resume by boot, E2B's filesystem-only pause, reads only the disk).
func (v *VM) syncGuest(ctx context.Context) {
	if v.State() != Running || v.ctl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, syncGuestTimeout)
	defer cancel()
	if _, err := v.ctl.PrepareSnapshot(ctx, false); err != nil {
		// The shim's stderr is containerd's log of it.
		fmt.Fprintf(os.Stderr, "vm %s: pause: the guest did not sync its disks (%v); pausing as it is\n", v.cfg.Name, err)
	}
}

// restoreNetwork gives the VM its network back, whatever happened to
// the snapshot or its caller (if it fails the VM runs on without
// network, and the snapshot fails saying so).
func (v *VM) restoreNetwork(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := v.ctl.RestoreNetwork(ctx); err != nil {
		return fmt.Errorf("the VM did not get its network back after the snapshot: %w", v.qmpErr(err, "restore network"))
	}
	return nil
}

func (v *VM) newManifest() (*snapshot.Manifest, error) {
	qv, err := QEMUVersion(v.QEMU)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(v.spec.BaseDisk)
	if err != nil {
		return nil, err
	}
	diskSum, err := snapshot.DiskSHA256(v.spec.BaseDisk)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	labels := maps.Clone(v.cfg.Labels)
	v.mu.Unlock()
	return &snapshot.Manifest{Version: snapshot.ManifestVersion, Created: time.Now().UTC(), Accel: v.spec.Accel, QEMUVersion: qv,
		CPU: CPUFingerprint(), VCPU: v.spec.VCPU, MemoryMiB: v.spec.MemoryMiB,
		BaseDisk: snapshot.FileRef{Path: v.spec.BaseDisk, Size: fi.Size(), SHA256: diskSum}, Labels: labels}, nil
}

// saveWhilePaused is the part of a snapshot the VM waits for.
func (v *VM) saveWhilePaused(ctx context.Context, dir string, m *snapshot.Manifest) error {
	// Device state only: xen-save-devices-state skips RAM sections, which
	// x-ignore-shared cannot do for a restored VM's private mapping.
	// QEMU writes it where it can (a jailed QEMU sees only its own
	// directories); the host moves it into the snapshot.
	saved := filepath.Join(v.cfg.RunDir, stateSaving)
	if err := v.qmp.Execute(ctx, "xen-save-devices-state", map[string]any{"filename": saved, "live": false}, nil); err != nil {
		return v.qmpErr(err, "save device state")
	}
	return v.saveFiles(dir, m)
}

// saveFiles copies the paused VM's files into the snapshot: the device
// state QEMU just saved, the RAM, the writable layer. All three are in
// directories QEMU can write: each is read beneath its directory, only if
// it is the VM's own regular file with one link (a link planted in its
// place is refused, not followed).
func (v *VM) saveFiles(dir string, m *snapshot.Manifest) error {
	if err := v.collectState(dir); err != nil {
		return err
	}
	if err := v.saveMemory(dir, m); err != nil {
		return err
	}
	var err error
	m.DiskExtents, err = copyVMFile(v.spec.Layer, filepath.Join(dir, snapshot.DiskFile))
	if err != nil {
		return fmt.Errorf("writable layer: %w", err)
	}
	return nil
}

// stateSaving is the device state QEMU writes in its run directory.
const stateSaving = snapshot.StateFile + ".saving"

// collectState moves the device state QEMU saved in its run directory
// into the snapshot: read beneath the run directory (not a link QEMU put
// there instead), then removed.
func (v *VM) collectState(dir string) error {
	run, err := OpenDir(v.cfg.RunDir)
	if err != nil {
		return fmt.Errorf("device state: %w", err)
	}
	defer run.Close()
	_, err = copyFromDir(run, stateSaving, filepath.Join(dir, snapshot.StateFile))
	if rmErr := run.Remove(stateSaving); err == nil {
		err = rmErr
	}
	if err != nil {
		return fmt.Errorf("device state: %w", err)
	}
	return nil
}

func (v *VM) saveMemory(dir string, m *snapshot.Manifest) error {
	if v.base == nil {
		if _, err := copyVMFile(v.spec.MemoryPath, filepath.Join(dir, snapshot.MemoryFile)); err != nil {
			return fmt.Errorf("guest RAM: %w", err)
		}
		return nil
	}
	mp, err := findMappingByID(v.PID(), v.ramID)
	if err != nil {
		return err
	}
	if id, err := fileID(v.spec.MemoryPath); err != nil || id != v.ramID {
		// The base this VM maps is gone (or replaced): a layer over it
		// could never be restored, so the snapshot takes all of the RAM.
		m.FullRAM = true
		return copyMapping(v.PID(), mp, filepath.Join(dir, snapshot.MemoryFile))
	}
	rs, err := captureLayer(v.PID(), mp, filepath.Join(dir, snapshot.LayerFile))
	m.LayerRuns = rs
	for _, r := range rs {
		m.DirtyBytes += (r[1] - r[0]) * pageSize
	}
	return err
}

// seal checksums the files and writes the manifest, last.
func (v *VM) seal(dir string, m *snapshot.Manifest) error {
	var err error
	if m.State, err = snapshot.NewFileRef(dir, snapshot.StateFile); err != nil {
		return err
	}
	if m.Disk, err = snapshot.NewDataRef(dir, snapshot.DiskFile, m.DiskExtents); err != nil {
		return err
	}
	if v.base == nil || m.FullRAM {
		if m.Memory, err = snapshot.NewFileRef(dir, snapshot.MemoryFile); err != nil {
			return err
		}
		m.DirtyBytes = allocated(filepath.Join(dir, snapshot.MemoryFile))
	} else {
		m.Memory = v.base.Memory // the base this VM maps, by absolute path
		layer, err := snapshot.NewDataRef(dir, snapshot.LayerFile, snapshot.LayerExtents(m.LayerRuns))
		if err != nil {
			return err
		}
		m.MemoryLayer = &layer
	}
	return m.Write(dir)
}

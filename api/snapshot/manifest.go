// Package snapshot is the on-disk format of a sandlot snapshot: the
// files of a snapshot directory, its manifest (what it holds, what may
// restore it, the checksums that seal it) and the sha256 sidecar of a base
// disk. The VM layer writes it, the shim and the node agent read it, the
// store signs and checks it; all of them parse a manifest here and only
// here. Standard library only, so any of them may import it.
package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ManifestVersion is the snapshot format; restores refuse other versions.
const ManifestVersion = 1

// PageSize is the unit of a memory layer's page runs (LayerRuns).
const PageSize = 4096

// Snapshot file names inside a snapshot directory.
const (
	ManifestFile = "manifest.json"
	StateFile    = "state"        // device state (no RAM)
	MemoryFile   = "memory"       // full RAM (first-generation VM)
	LayerFile    = "memory.layer" // the pages a restored VM changed
	DiskFile     = "disk.raw"     // the writable disk layer
)

// Manifest describes a snapshot: what it holds and what may restore it.
type Manifest struct {
	Version     int       `json:"version"`
	Created     time.Time `json:"created"`
	Accel       string    `json:"accel"`
	QEMUVersion string    `json:"qemuVersion"`
	CPU         string    `json:"cpuFingerprint"`
	Kernel      string    `json:"kernelSHA256,omitempty"`
	VCPU        int       `json:"vcpu"`
	MemoryMiB   int       `json:"memoryMiB"`
	BaseDisk    FileRef   `json:"baseDisk"`
	State       FileRef   `json:"state"`
	Disk        FileRef   `json:"disk"`
	// Memory is the full RAM of a first-generation VM; for a restored VM
	// it is the base it maps (another snapshot's memory, by path) and
	// MemoryLayer holds the pages it changed.
	Memory      FileRef  `json:"memory"`
	MemoryLayer *FileRef `json:"memoryLayer,omitempty"`
	// DiskExtents are the data runs {offset, length} of Disk: a restore
	// copies those (null, from a manifest before them: what SEEK_DATA finds).
	DiskExtents [][2]int64 `json:"diskExtents"`
	// LayerRuns are the page runs [first, end) MemoryLayer holds, in
	// pages of PageSize.
	LayerRuns [][2]int64 `json:"layerRuns,omitempty"`
	// FullRAM marks a restored VM's snapshot that holds all of its RAM
	// because its base was gone: the fallback, reported as such.
	FullRAM bool `json:"fullRAMFallback,omitempty"`
	// DirtyBytes is the memory the VM changed since its base.
	DirtyBytes int64 `json:"dirtyBytes"`
	// PausedNanos is how long the VM was paused to take it.
	PausedNanos int64 `json:"pausedNanos"`
	// Labels are the VM's Config.Labels when it was taken.
	Labels map[string]string `json:"labels,omitempty"`
}

// FileRef is a file of (or used by) a snapshot. A restore opens it only
// inside the roots it was given (vm.Confine).
type FileRef struct {
	Path   string `json:"path"` // relative to the snapshot dir, or absolute
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	// DataSHA256, set instead of SHA256 on the sparse files (the disk
	// layer, the memory layer), is the sha256 of their data extents back to
	// back (DiskExtents; LayerRuns in pages): the bytes a restore reads
	// (the rest are holes, zeros by construction). A snapshot hashes its
	// few MiB of data, not the 1 GiB and 256 MiB of holes around it
	// (1-2 s here).
	DataSHA256 string `json:"dataSHA256,omitempty"`
}

// Abs is the file's path: Path itself when absolute, else under dir
// (relative paths may leave dir, e.g. "../<other snapshot>/memory").
func (f FileRef) Abs(dir string) string {
	if filepath.IsAbs(f.Path) {
		return f.Path
	}
	return filepath.Join(dir, f.Path)
}

// TotalBytes is the data the snapshot itself holds (allocated blocks).
func (m *Manifest) TotalBytes(dir string) int64 {
	var n int64
	for _, f := range []FileRef{m.State, m.Disk, m.Memory} {
		if !filepath.IsAbs(f.Path) {
			n += allocated(f.Abs(dir))
		}
	}
	if m.MemoryLayer != nil {
		n += allocated(m.MemoryLayer.Abs(dir))
	}
	return n
}

// ReadManifest loads and checks a snapshot's manifest.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	m := &Manifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("snapshot %s: corrupt manifest: %w", dir, err)
	}
	if m.Version != ManifestVersion {
		return nil, fmt.Errorf("snapshot %s: format version %d, this sandlot reads %d", dir, m.Version, ManifestVersion)
	}
	return m, nil
}

// Write replaces dir's manifest atomically (data files first, the
// manifest last: its presence means the snapshot is complete).
func (m *Manifest) Write(dir string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ManifestFile+".tmp")
	_ = os.Remove(tmp) // a read-only leftover of a crashed write
	if err := os.WriteFile(tmp, b, 0o400); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil { // the data files' entries first
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestFile)); err != nil { // the manifest last: its presence means complete
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Compatible says why this host cannot restore the snapshot, or nil.
func (m *Manifest) Compatible(accel, qemuVersion, cpu string) error {
	switch {
	case m.Accel != accel:
		return fmt.Errorf("snapshot was taken under %s, this host runs %s", m.Accel, accel)
	case m.QEMUVersion != qemuVersion:
		return fmt.Errorf("snapshot was taken by QEMU %s, this host has %s", m.QEMUVersion, qemuVersion)
	case m.CPU != cpu:
		return fmt.Errorf("snapshot CPU fingerprint %s differs from this host's %s", m.CPU, cpu)
	}
	return nil
}

// CheckFiles verifies every file the snapshot needs exists with its size,
// and that the small ones (state) still hash right: what a restore checks
// before it opens them. Large files are checked by size here and by Verify
// in full.
func (m *Manifest) CheckFiles(dir string) error {
	refs := []FileRef{m.State, m.Disk, m.Memory}
	if m.MemoryLayer != nil {
		refs = append(refs, *m.MemoryLayer)
	}
	for _, f := range refs {
		fi, err := os.Stat(f.Abs(dir))
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", dir, err)
		}
		if fi.Size() != f.Size {
			return fmt.Errorf("snapshot %s: %s is %d bytes, the manifest says %d (truncated or replaced)", dir, f.Path, fi.Size(), f.Size)
		}
	}
	sum, err := fileSHA256(m.State.Abs(dir))
	if err != nil || sum != m.State.SHA256 {
		return fmt.Errorf("snapshot %s: device state is corrupt (sha256 %s, manifest %s)", dir, sum, m.State.SHA256)
	}
	return nil
}

// Verify checks every file of the snapshot against its checksum.
func Verify(dir string) error {
	m, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	refs := []FileRef{m.State, m.Disk, m.Memory}
	if m.MemoryLayer != nil {
		refs = append(refs, *m.MemoryLayer)
	}
	for _, f := range refs {
		if err := m.verifyRef(dir, f); err != nil {
			return fmt.Errorf("snapshot %s: %w", dir, err)
		}
	}
	return nil
}

// verifyRef checks one file: its whole content, or for the disk layer
// its data extents (DataSHA256).
func (m *Manifest) verifyRef(dir string, f FileRef) error {
	sum, want, err := "", f.SHA256, error(nil)
	if f.SHA256 == "" && f.DataSHA256 != "" {
		want = f.DataSHA256
		sum, err = ExtentsSHA256(f.Abs(dir), m.ExtentsOf(f))
	} else {
		sum, err = fileSHA256(f.Abs(dir))
	}
	if err != nil {
		return err
	}
	if sum != want {
		return fmt.Errorf("%s changed (sha256 %s, manifest %s)", f.Path, sum, want)
	}
	return nil
}

// ExtentsOf are the data extents in bytes of a file sealed by them
// (DataSHA256): the memory layer's page runs, or the disk layer's.
func (m *Manifest) ExtentsOf(f FileRef) [][2]int64 {
	if m.MemoryLayer != nil && f.Path == m.MemoryLayer.Path {
		return LayerExtents(m.LayerRuns)
	}
	return m.DiskExtents
}

// LayerExtents are the byte extents {offset, length} of a memory layer's
// page runs [first, end).
func LayerExtents(runs [][2]int64) [][2]int64 {
	ext := make([][2]int64, 0, len(runs))
	for _, r := range runs {
		ext = append(ext, [2]int64{r[0] * PageSize, (r[1] - r[0]) * PageSize})
	}
	return ext
}

// ExtentsSHA256 hashes the file's extents back to back, reading nothing
// else of it (a sparse layer's holes through FUSE cost as much as data):
// what DataSHA256 records.
func ExtentsSHA256(p string, extents [][2]int64) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	for _, e := range extents {
		if _, err := io.Copy(h, io.NewSectionReader(f, e[0], e[1])); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// NewFileRef describes the file name of dir for the manifest by its whole
// content's sha256.
func NewFileRef(dir, name string) (FileRef, error) {
	p := filepath.Join(dir, name)
	fi, err := os.Stat(p)
	if err != nil {
		return FileRef{}, err
	}
	sum, err := fileSHA256(p)
	return FileRef{Path: name, Size: fi.Size(), SHA256: sum}, err
}

// NewDataRef describes a sparse file of dir (the disk layer, the memory
// layer) by the sha256 of its data extents (DataSHA256).
func NewDataRef(dir, name string, extents [][2]int64) (FileRef, error) {
	p := filepath.Join(dir, name)
	fi, err := os.Stat(p)
	if err != nil {
		return FileRef{}, err
	}
	sum, err := ExtentsSHA256(p, extents)
	return FileRef{Path: name, Size: fi.Size(), DataSHA256: sum}, err
}

// DiskSumSuffix names a base disk's sha256 sidecar: "<disk>.sha256", the
// sum in hex and a newline.
const DiskSumSuffix = ".sha256"

// ReadDiskSum is the sha256 in disk's sidecar; ok is false when there is
// none (or it holds no sha256).
func ReadDiskSum(disk string) (sum string, ok bool) {
	b, err := os.ReadFile(disk + DiskSumSuffix)
	if sum = strings.TrimSpace(string(b)); err != nil || len(sum) != 64 {
		return "", false
	}
	return sum, true
}

// WriteDiskSum writes disk's sidecar, read-only.
func WriteDiskSum(disk, sum string) error {
	return os.WriteFile(disk+DiskSumSuffix, []byte(sum+"\n"), 0o400)
}

// DiskSHA256 is a base disk's sha256, read from its sidecar (ReadDiskSum),
// which the image cache writes when it builds the disk (base disks are
// large and never change); without one it is computed and the sidecar
// written for the next snapshot.
func DiskSHA256(disk string) (string, error) {
	if sum, ok := ReadDiskSum(disk); ok {
		return sum, nil
	}
	sum, err := fileSHA256(disk)
	if err != nil {
		return "", fmt.Errorf("base disk sha256: %w", err)
	}
	_ = WriteDiskSum(disk, sum) // a cache: a read-only dir just recomputes
	return sum, nil
}

// allocated is the bytes a file really occupies (its blocks).
func allocated(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

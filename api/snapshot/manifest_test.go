package snapshot_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/api/snapshot"
)

// sealed writes a snapshot the way the VM layer seals one: state and
// memory by their whole content, the disk layer (sparse, 64 MiB) by its
// data extents, the manifest last.
func sealed(t *testing.T) (dir string, m *snapshot.Manifest) {
	t.Helper()
	dir = t.TempDir()
	for _, name := range []string{snapshot.StateFile, snapshot.MemoryFile} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name+" bytes"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	disk, err := os.Create(filepath.Join(dir, snapshot.DiskFile))
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	if err := disk.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	m = &snapshot.Manifest{Version: snapshot.ManifestVersion, Created: time.Now().UTC().Truncate(time.Second),
		Accel: "kvm", QEMUVersion: "8.2.2", CPU: "abcd", VCPU: 2, MemoryMiB: 256, Labels: map[string]string{"a": "b"},
		DiskExtents: [][2]int64{{1 << 20, 8192}, {40 << 20, 8192}}}
	for _, e := range m.DiskExtents {
		if _, err := disk.WriteAt(bytes.Repeat([]byte{0xab}, int(e[1])), e[0]); err != nil {
			t.Fatal(err)
		}
	}
	if m.State, err = snapshot.NewFileRef(dir, snapshot.StateFile); err != nil {
		t.Fatal(err)
	}
	if m.Memory, err = snapshot.NewFileRef(dir, snapshot.MemoryFile); err != nil {
		t.Fatal(err)
	}
	if m.Disk, err = snapshot.NewDataRef(dir, snapshot.DiskFile, m.DiskExtents); err != nil {
		t.Fatal(err)
	}
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir, m
}

// What Write writes, ReadManifest reads back, and the manifest is
// read-only.
func TestManifestRoundTrip(t *testing.T) {
	dir, m := sealed(t)
	got, err := snapshot.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("read back %+v, wrote %+v", got, m)
	}
	fi, err := os.Stat(filepath.Join(dir, snapshot.ManifestFile))
	if err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("manifest %v, %v: want mode 0400", fi, err)
	}
	if err := m.Write(dir); err != nil { // a rewrite replaces the read-only file
		t.Fatalf("rewrite: %v", err)
	}
}

// A manifest that is missing, not JSON, or of another format version is
// refused, naming why.
func TestReadManifestRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"missing", "", "no such file"},
		{"not json", "{not json", "corrupt manifest"},
		{"other version", `{"version": 2}`, "format version 2, this sandlot reads 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != "" {
				if err := os.WriteFile(filepath.Join(dir, snapshot.ManifestFile), []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := snapshot.ReadManifest(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadManifest = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// The disk layer is sealed by its data extents: Verify reads those, and a
// changed byte in one is caught, naming the file.
func TestDiskLayerSealedByItsExtents(t *testing.T) {
	dir, m := sealed(t)
	if m.Disk.SHA256 != "" || len(m.Disk.DataSHA256) != 64 || m.Disk.Size != 64<<20 {
		t.Fatalf("disk ref %+v: want its data extents' sha256 and its full size", m.Disk)
	}
	if err := snapshot.Verify(dir); err != nil {
		t.Fatalf("intact snapshot: %v", err)
	}
	if err := m.CheckFiles(dir); err != nil {
		t.Fatalf("intact snapshot: %v", err)
	}
	disk, err := os.OpenFile(filepath.Join(dir, snapshot.DiskFile), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	if _, err := disk.WriteAt([]byte{0xac}, 40<<20+100); err != nil {
		t.Fatal(err)
	}
	if err := snapshot.Verify(dir); err == nil || !strings.Contains(err.Error(), snapshot.DiskFile+" changed") {
		t.Fatalf("a byte changed in an extent: %v, want the disk named", err)
	}
}

// CheckFiles, what a restore checks before it opens anything: every file
// at its size, the device state by its sha256.
func TestCheckFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(dir string) error
		want string
	}{
		{"state changed", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, snapshot.StateFile), []byte("STATE bytes"), 0o600)
		}, "device state is corrupt"},
		{"memory truncated", func(dir string) error {
			return os.Truncate(filepath.Join(dir, snapshot.MemoryFile), 3)
		}, "truncated or replaced"},
		{"disk gone", func(dir string) error {
			return os.Remove(filepath.Join(dir, snapshot.DiskFile))
		}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, m := sealed(t)
			if err := tc.edit(dir); err != nil {
				t.Fatal(err)
			}
			if err := m.CheckFiles(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckFiles = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCompatible(t *testing.T) {
	m := &snapshot.Manifest{Accel: "kvm", QEMUVersion: "8.2.2", CPU: "abcd"}
	for _, tc := range []struct {
		accel, qemu, cpu, want string
	}{
		{"kvm", "8.2.2", "abcd", ""},
		{"tcg", "8.2.2", "abcd", "taken under kvm, this host runs tcg"},
		{"kvm", "9.0.0", "abcd", "taken by QEMU 8.2.2, this host has 9.0.0"},
		{"kvm", "8.2.2", "ffff", "fingerprint abcd differs from this host's ffff"},
	} {
		err := m.Compatible(tc.accel, tc.qemu, tc.cpu)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compatible(%s, %s, %s) = %v, want %q", tc.accel, tc.qemu, tc.cpu, err, tc.want)
		}
	}
}

// A memory layer's extents are its page runs in bytes; the disk layer's
// are DiskExtents.
func TestExtentsOf(t *testing.T) {
	m := &snapshot.Manifest{DiskExtents: [][2]int64{{0, 4096}}, LayerRuns: [][2]int64{{2, 5}, {10, 11}},
		MemoryLayer: &snapshot.FileRef{Path: snapshot.LayerFile}, Disk: snapshot.FileRef{Path: snapshot.DiskFile}}
	want := [][2]int64{{2 * snapshot.PageSize, 3 * snapshot.PageSize}, {10 * snapshot.PageSize, snapshot.PageSize}}
	if got := m.ExtentsOf(*m.MemoryLayer); !reflect.DeepEqual(got, want) {
		t.Errorf("layer extents %v, want %v", got, want)
	}
	if got := m.ExtentsOf(m.Disk); !reflect.DeepEqual(got, m.DiskExtents) {
		t.Errorf("disk extents %v, want %v", got, m.DiskExtents)
	}
}

// A base disk's sha256 is computed once and kept in its sidecar, which
// later calls read; a sidecar that holds no sha256 is ignored.
func TestDiskSHA256Sidecar(t *testing.T) {
	disk := filepath.Join(t.TempDir(), "base.ext4")
	if err := os.WriteFile(disk, []byte("a base disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := snapshot.ReadDiskSum(disk); ok {
		t.Fatal("a sidecar before any was written")
	}
	want := sha256.Sum256([]byte("a base disk"))
	sum, err := snapshot.DiskSHA256(disk)
	if err != nil || sum != hex.EncodeToString(want[:]) {
		t.Fatalf("DiskSHA256 = %s, %v; want %x", sum, err, want)
	}
	if got, ok := snapshot.ReadDiskSum(disk); !ok || got != sum {
		t.Fatalf("sidecar %q, %v; want %s", got, ok, sum)
	}
	if err := os.Remove(disk + snapshot.DiskSumSuffix); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(disk+snapshot.DiskSumSuffix, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := snapshot.ReadDiskSum(disk); ok {
		t.Fatal("a sidecar without a sha256 was read")
	}
}

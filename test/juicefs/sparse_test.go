package juicefs_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
)

// TestDiskLayerSignedByItsExtents: a snapshot's disk layer, sealed by the
// VM layer with the sha256 of its data extents (not the 1 GiB of holes),
// is signed so at Commit; another node verifying content hashes those
// extents through its mount, and a byte changed in one is refused.
func TestDiskLayerSignedByItsExtents(t *testing.T) {
	sub := fresh()
	a := node(t, ma, sub, "node-a", time.Hour)
	key := "snapshots/sparse-disk"
	dir := a.Dir(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m := &snapshot.Manifest{Version: snapshot.ManifestVersion, DiskExtents: [][2]int64{{1 << 20, 64 << 10}, {100 << 20, 64 << 10}}}
	layer := filepath.Join(t.TempDir(), "layer")
	writeSparse(t, layer, 256<<20, m.DiskExtents)
	data, err := os.ReadFile(layer)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, e := range m.DiskExtents {
		h.Write(data[e[0] : e[0]+e[1]])
	}
	writeSparse(t, filepath.Join(dir, snapshot.DiskFile), 256<<20, m.DiskExtents)
	m.Disk = snapshot.FileRef{Path: snapshot.DiskFile, Size: 256 << 20, DataSHA256: hex.EncodeToString(h.Sum(nil))}
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, key, 60*time.Second)
	if _, release, err := nodeVerifyingContent(t, mb, sub).Open(ctx, key); err != nil {
		t.Fatalf("content check of a disk layer signed by its extents: %v", err)
	} else {
		release()
	}
	f, err := os.OpenFile(filepath.Join(mb.Dir, sub, key, snapshot.DiskFile), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0}, 100<<20+7); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, _, err := nodeVerifyingContent(t, mb, sub).Open(ctx, key); !errors.Is(err, store.ErrIntegrity) {
		t.Fatalf("Open of a disk layer changed inside an extent = %v, want ErrIntegrity", err)
	}
}

// writeSparse makes a file of size with pseudo-random bytes in extents.
func writeSparse(t *testing.T, p string, size int64, extents [][2]int64) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, e := range extents {
		b := make([]byte, e[1])
		for i := range b {
			b[i] = byte(i*7 + int(e[0]>>20))
		}
		if _, err := f.WriteAt(b, e[0]); err != nil {
			t.Fatal(err)
		}
	}
}

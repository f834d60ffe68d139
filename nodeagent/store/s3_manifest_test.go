package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	s3 "github.com/minio/minio-go/v7"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	miniotest "github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
)

// TestS3UploadTakesTheManifestsSums: a snapshot's sparse disk layer is
// uploaded by the data extents and sha256 its manifest records (the VM
// layer hashed them as it wrote the file) instead of hashing the 1 GiB
// file again: the object holds what the manifest lists (here one extent
// reaches past the data SEEK_DATA would find), and another node gets the
// same bytes back, checked against that sha256.
func TestS3UploadTakesTheManifestsSums(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := context.Background()
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	b := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-b"))
	key := "snapshots/sealed"
	dir := a.Dir(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	const size = 1 << 30
	disk := filepath.Join(dir, snapshot.DiskFile)
	f, err := os.Create(disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0x5a}, 1<<20), 8<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	extents := [][2]int64{{8 << 20, 2 << 20}} // 1 MiB of data, 1 MiB of hole after it
	data, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data[8<<20 : 10<<20])
	m := &snapshot.Manifest{Version: snapshot.ManifestVersion, DiskExtents: extents,
		Disk: snapshot.FileRef{Path: snapshot.DiskFile, Size: size, DataSHA256: hex.EncodeToString(sum[:])}}
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, key, 2*time.Minute)
	info, err := srv.Client().StatObject(ctx, srv.Bucket, key+"/"+snapshot.DiskFile, s3.StatObjectOptions{})
	if err != nil || info.Size != 2<<20 {
		t.Fatalf("disk object: %d bytes (%v), want the manifest's 2 MiB extent", info.Size, err)
	}
	got, release, err := b.Open(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	have, err := os.ReadFile(filepath.Join(got, snapshot.DiskFile))
	if err != nil || !bytes.Equal(have, data) {
		t.Fatalf("disk layer differs after the download (%v)", err)
	}
}

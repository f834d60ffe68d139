package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	s3 "github.com/minio/minio-go/v7"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	miniotest "github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/nodeagent/store/storetest"
)

// A writer of the bucket (not a node of the cluster) changes what a
// node uploaded; another node's Open must refuse it with ErrIntegrity,
// leave nothing of it behind, and leave every other key alone.

// bucketEdit is what an attacker with write access to the bucket does.
type bucketEdit struct {
	srv    *miniotest.Server
	bucket string
}

func (b bucketEdit) get(t *testing.T, object string) []byte {
	t.Helper()
	obj, err := b.srv.Client().GetObject(context.Background(), b.bucket, object, s3.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("get %s: %v", object, err)
	}
	return data
}

func (b bucketEdit) put(t *testing.T, object string, data []byte) {
	t.Helper()
	if _, err := b.srv.Client().PutObject(context.Background(), b.bucket, object, bytes.NewReader(data), int64(len(data)),
		s3.PutObjectOptions{}); err != nil {
		t.Fatalf("put %s: %v", object, err)
	}
}

// marker is the marker object's signed payload, parsed loosely.
func (b bucketEdit) marker(t *testing.T, key string) (payload map[string]any, sig string) {
	t.Helper()
	var env struct {
		Marker    json.RawMessage `json:"marker"`
		Signature string          `json:"signature"`
	}
	if err := json.Unmarshal(b.get(t, key+"/.complete"), &env); err != nil || env.Signature == "" {
		t.Fatalf("marker of %s is not a signed envelope: %v", key, err)
	}
	if err := json.Unmarshal(env.Marker, &payload); err != nil {
		t.Fatal(err)
	}
	return payload, env.Signature
}

// putMarker writes a marker envelope for payload with sig.
func (b bucketEdit) putMarker(t *testing.T, key string, payload map[string]any, sig func([]byte) string) {
	t.Helper()
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := json.Marshal(map[string]any{"marker": json.RawMessage(raw), "signature": sig(raw)})
	b.put(t, key+"/.complete", env)
}

// setFile sets a file entry's size and sha256 in a marker payload (what
// an attacker does to match the bytes they put).
func setFile(payload map[string]any, name string, data []byte) {
	for _, f := range payload["files"].([]any) {
		if e := f.(map[string]any); e["path"] == name {
			e["size"], e["sha256"], e["extents"] = len(data), sha256hex(data), nil
		}
	}
}

// committed writes and commits key on a, waits Ready, and returns what
// was written.
func committed(t *testing.T, a *store.S3, key string, size int64) storetest.Snapshot {
	t.Helper()
	want := storetest.Write(t, storetest.Pair{}, a, key, size)
	if _, err := a.Commit(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	storetest.WaitReady(t, a, key, time.Minute)
	return want
}

// refused checks b's Open of key fails with ErrIntegrity saying want and
// leaves no partial copy.
func refused(t *testing.T, b *store.S3, root, key, want string) {
	t.Helper()
	_, _, err := b.Open(context.Background(), key)
	if !errors.Is(err, store.ErrIntegrity) || !strings.Contains(err.Error(), "IntegrityCheckFailed") || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open of a tampered %s = %v, want IntegrityCheckFailed saying %q", key, err, want)
	}
	t.Logf("refused: %v", err)
	if _, err := os.Stat(b.Dir(key)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is on the node after a failed check: %v", key, err)
	}
	if ents, err := os.ReadDir(filepath.Join(root, ".store", "tmp")); err != nil || len(ents) > 0 {
		t.Fatalf("partial download left behind: %v, %v", ents, err)
	}
}

// TestS3IntegrityFlippedByte: one byte of the memory object changed in
// the bucket fails the download as it streams; the partial copy goes,
// and another key on the same node is untouched.
func TestS3IntegrityFlippedByte(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := context.Background()
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	bRoot := t.TempDir()
	b := mustS3(t, s3Config(t, srv, srv.Bucket, bRoot, "node-b"))
	good, bad := "snapshots/good", "snapshots/flipped"
	wantGood := committed(t, a, good, 4<<20)
	committed(t, a, bad, 20<<20)
	dir, release, err := b.Open(ctx, good)
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	release()
	edit := bucketEdit{srv, srv.Bucket}
	mem := edit.get(t, bad+"/memory")
	mem[len(mem)/2] ^= 0x01
	edit.put(t, bad+"/memory", mem)
	refused(t, b, bRoot, bad, "memory of "+bad)
	wantGood.Check(t, dir) // the other key's copy is intact
	if _, release, err := b.Open(ctx, good); err != nil {
		t.Fatalf("the untampered key after the refusal: %v", err)
	} else {
		release()
	}
}

// TestS3IntegrityForgedMarker: a marker signed by another key (its
// sha256s matching the changed object) is refused, and so is one replayed
// under another key name.
func TestS3IntegrityForgedMarker(t *testing.T) {
	srv := miniotest.Start(t)
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	bRoot := t.TempDir()
	b := mustS3(t, s3Config(t, srv, srv.Bucket, bRoot, "node-b"))
	key := "snapshots/forged"
	committed(t, a, key, 2<<20)
	edit := bucketEdit{srv, srv.Bucket}
	payload, _ := edit.marker(t, key)
	genuine := edit.get(t, key+"/.complete")
	state := bytes.Repeat([]byte{0xee}, 64<<10)
	edit.put(t, key+"/state", state)
	setFile(payload, "state", state)
	other, _ := store.NewKeys(otherKey, nil)
	edit.putMarker(t, key, payload, func(raw []byte) string { return store.SignMarker(other, key, raw) })
	refused(t, b, bRoot, key, "which this node does not hold")

	// The genuine marker of key, moved under another name with its data.
	replay := "snapshots/replayed"
	for _, o := range []string{"manifest.json", "memory", "disk.raw", "state"} {
		edit.put(t, replay+"/"+o, edit.get(t, key+"/"+o))
	}
	edit.put(t, replay+"/.complete", genuine)
	refused(t, b, bRoot, replay, "does not match its signature")
}

// TestS3IntegrityEditedManifest: a manifest changed in the bucket to name
// /etc/passwd is refused whatever the attacker does with the marker:
// left as is, updated with the old signature, or rewritten unsigned.
func TestS3IntegrityEditedManifest(t *testing.T) {
	srv := miniotest.Start(t)
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	bRoot := t.TempDir()
	b := mustS3(t, s3Config(t, srv, srv.Bucket, bRoot, "node-b"))
	key := "snapshots/edited"
	committed(t, a, key, 2<<20)
	edit := bucketEdit{srv, srv.Bucket}
	payload, sig := edit.marker(t, key)
	forged, _ := json.Marshal(snapshot.Manifest{Version: snapshot.ManifestVersion, Memory: snapshot.FileRef{Path: "/etc/passwd"},
		State: snapshot.FileRef{Path: snapshot.StateFile}, Disk: snapshot.FileRef{Path: snapshot.DiskFile}})
	edit.put(t, key+"/manifest.json", forged)
	refused(t, b, bRoot, key, key+"/manifest.json holds")

	setFile(payload, "manifest.json", forged)
	edit.putMarker(t, key, payload, func([]byte) string { return sig })
	refused(t, b, bRoot, key, "does not match its signature")

	raw, _ := json.Marshal(payload) // the format before markers were signed
	edit.put(t, key+"/.complete", raw)
	refused(t, b, bRoot, key, "is not signed")
}

// TestS3IntegrityRotation: a node holding a new key and the previous one
// still restores data signed with the previous key.
func TestS3IntegrityRotation(t *testing.T) {
	srv := miniotest.Start(t)
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	key := "snapshots/rotated"
	want := committed(t, a, key, 2<<20)
	cfg := s3Config(t, srv, srv.Bucket, t.TempDir(), "node-b")
	var err error
	if cfg.Keys, err = store.NewKeys(otherKey, clusterKey); err != nil {
		t.Fatal(err)
	}
	dir, release, err := mustS3(t, cfg).Open(context.Background(), key)
	if err != nil {
		t.Fatalf("Open with the signing key as the previous one: %v", err)
	}
	defer release()
	want.Check(t, dir)
}

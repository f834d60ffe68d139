package store_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	s3 "github.com/minio/minio-go/v7"

	miniotest "github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// TestS3ConfirmRepublishes: a key a node records Ready whose objects were
// removed from the bucket behind the store's back is not confirmed Ready:
// the node that wrote it uploads it again, one that downloaded it does
// too, and a node holding neither record nor copy finds it Failed. Once
// back, another node opens it.
func TestS3ConfirmRepublishes(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := context.Background()
	a := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-a"))
	b := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-b"))
	k := readyKeys(t, a, "confirm", 2)
	open(t, b, k[1])() // b holds a downloaded copy of k[1]

	for _, tc := range []struct {
		node *store.S3
		key  string
	}{{a, k[0].Key}, {b, k[1].Key}} {
		removeObjects(t, srv, tc.key)
		st, err := tc.node.Confirm(ctx, tc.key)
		if err != nil || st.Remote != store.RemoteInProgress {
			t.Fatalf("Confirm of %s, gone from the bucket = %+v, %v; want InProgress (uploading again)", tc.key, st, err)
		}
		poll.Eventually(t, time.Minute, tc.key+" confirmed Ready again", func() error {
			st, err := tc.node.Confirm(ctx, tc.key)
			if err == nil && st.Remote != store.RemoteReady {
				return fmt.Errorf("%s: %s", st.Remote, st.Message)
			}
			return err
		})
	}
	c := mustS3(t, s3Config(t, srv, srv.Bucket, t.TempDir(), "node-c"))
	open(t, c, k[0])() // the republished objects restore elsewhere
	open(t, c, k[1])()

	// Recorded Ready on a, gone from the bucket and from a's disk.
	removeObjects(t, srv, k[0].Key)
	if err := os.RemoveAll(a.Dir(k[0].Key)); err != nil {
		t.Fatal(err)
	}
	if st, err := a.Confirm(ctx, k[0].Key); err != nil || st.Remote != store.RemoteFailed {
		t.Fatalf("Confirm of a key held nowhere = %+v, %v; want Failed", st, err)
	}
}

func removeObjects(t *testing.T, srv *miniotest.Server, key string) {
	t.Helper()
	for _, name := range srv.Objects(t, srv.Bucket, key+"/") {
		if err := srv.Client().RemoveObject(context.Background(), srv.Bucket, name, s3.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if left := srv.Objects(t, srv.Bucket, key+"/"); len(left) > 0 {
		t.Fatalf("bucket still holds %v", left)
	}
}

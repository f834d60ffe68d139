package minio

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	s3 "github.com/minio/minio-go/v7"
)

// TestStartStopRestart: the server serves objects, goes away on Stop and
// comes back with its data on Restart.
func TestStartStopRestart(t *testing.T) {
	start := time.Now()
	srv := Start(t)
	t.Logf("started in %s at %s", time.Since(start).Round(time.Millisecond), srv.Endpoint)
	ctx := context.Background()
	c := srv.Client()
	data := bytes.Repeat([]byte("sandlot"), 1000)
	if _, err := c.PutObject(ctx, srv.Bucket, "a/b", bytes.NewReader(data), int64(len(data)), s3.PutObjectOptions{}); err != nil {
		t.Fatalf("put: %v", err)
	}

	srv.Stop()
	if resp, err := http.Get("http://" + srv.Endpoint + "/minio/health/ready"); err == nil {
		resp.Body.Close()
		t.Fatalf("health answered after Stop: %s", resp.Status)
	}

	start = time.Now()
	srv.Restart()
	t.Logf("restarted in %s", time.Since(start).Round(time.Millisecond))
	obj, err := c.GetObject(ctx, srv.Bucket, "a/b", s3.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get after restart: %d bytes, err %v", len(got), err)
	}
	if names := srv.Objects(t, srv.Bucket, "a/"); len(names) != 1 || names[0] != "a/b" {
		t.Fatalf("objects = %v", names)
	}
	if other := srv.NewBucket(t); other == srv.Bucket {
		t.Fatalf("NewBucket reused %s", other)
	}
}

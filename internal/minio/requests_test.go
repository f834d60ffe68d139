package minio_test

import (
	"context"
	"io"
	"strings"
	"testing"

	s3 "github.com/minio/minio-go/v7"

	"github.com/sandlot-dev/sandlot/internal/minio"
)

// TestRequests: the request counters count what a client sent.
func TestRequests(t *testing.T) {
	s := minio.Start(t)
	c := s.Client()
	ctx := context.Background()
	before := s.Requests(t, "GetObject") // a scrape before: counters must not be served from a cache
	if _, err := c.PutObject(ctx, s.Bucket, "a", strings.NewReader("hello"), 5, s3.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		o, err := c.GetObject(ctx, s.Bucket, "a", s3.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(o); err != nil || string(b) != "hello" {
			t.Fatalf("got %q, %v", b, err)
		}
		o.Close()
	}
	if get, put := s.Requests(t, "GetObject")-before, s.Requests(t, "PutObject"); get != 2 || put != 1 {
		t.Fatalf("counters say %d GETs and %d PUTs, the client sent 2 and 1", get, put)
	}
}

package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	miniotest "github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// benchMemory is the memory file of the benchmark's snapshot; its
// writable layer is as large, with 64 KiB written (a sparse file whose
// holes are hashed as zeros).
const benchMemory = 256 << 20

// BenchmarkS3Download is another node's Open of a snapshot with a 256 MiB
// memory file (MinIO on this machine): "stream" checks every object's
// sha256 as the parts land (what Open does), "none" checks nothing (the
// download alone), "second-pass" downloads unchecked and then hashes
// every file again (what Open did before).
//
//	go test ./nodeagent/store/ -run '^$' -bench S3Download -benchtime 5x
func BenchmarkS3Download(b *testing.B) {
	cfg, key := benchSnapshot(b)
	for _, mode := range benchModes {
		b.Run(mode, func(b *testing.B) {
			b.StopTimer() // the store's set-up and clean-up are not the download's
			var total time.Duration
			for range b.N {
				total += downloadOnce(b, cfg, key, mode)
			}
			per := total / time.Duration(b.N)
			b.ReportMetric(float64(per.Milliseconds()), "ms/download")
			b.ReportMetric(float64(benchMemory)/1e6/per.Seconds(), "MB/s")
		})
	}
}

// TestS3VerifyCost logs what the check costs a download: the modes of
// BenchmarkS3Download taken in turns (a busy machine slows them alike),
// medians of five.
func TestS3VerifyCost(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cfg, key := benchSnapshot(t)
	times := map[string][]time.Duration{}
	for range 5 {
		for _, mode := range benchModes {
			times[mode] = append(times[mode], downloadOnce(t, cfg, key, mode))
		}
	}
	med := map[string]time.Duration{}
	for _, mode := range benchModes {
		slices.Sort(times[mode])
		med[mode] = times[mode][len(times[mode])/2]
		t.Logf("%-11s median %v of %v (%.0f MB/s)", mode, med[mode].Round(time.Millisecond), times[mode], float64(benchMemory)/1e6/med[mode].Seconds())
	}
	t.Logf("streaming check: +%v (%+.0f%%) over no check; the old second pass: +%v (%+.0f%%)",
		(med["stream"] - med["none"]).Round(time.Millisecond), 100*(float64(med["stream"])/float64(med["none"])-1),
		(med["second-pass"] - med["none"]).Round(time.Millisecond), 100*(float64(med["second-pass"])/float64(med["none"])-1))
}

var benchModes = []string{"stream", "none", "second-pass"}

// benchSnapshot commits the benchmark's snapshot on one node and returns
// the config of another node's store.
func benchSnapshot(tb testing.TB) (func(root string) store.S3Config, string) {
	srv := miniotest.Start(tb)
	cfg := func(root string) store.S3Config {
		return store.S3Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Region: miniotest.Region, Insecure: true,
			AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey, CacheRoot: root, Node: "node", Keys: testKeys(tb)}
	}
	a, err := store.NewS3(cfg(tb.TempDir()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close() })
	key := "snapshots/bench"
	writeBenchSnapshot(tb, a.Dir(key))
	if _, err := a.Commit(context.Background(), key); err != nil {
		tb.Fatal(err)
	}
	waitReady(tb, a, key)
	return cfg, key
}

// downloadOnce is one Open of key by a node with an empty cache.
func downloadOnce(tb testing.TB, cfg func(string) store.S3Config, key, mode string) time.Duration {
	root := tb.TempDir()
	defer os.RemoveAll(root)
	s, err := store.NewS3(cfg(root))
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	if mode != "stream" {
		store.SkipVerify(s)
	}
	start := time.Now()
	dir, release, err := s.Open(context.Background(), key)
	if err != nil {
		tb.Fatal(err)
	}
	defer release()
	if mode == "second-pass" {
		hashDir(tb, dir)
	}
	return time.Since(start)
}

func writeBenchSnapshot(b testing.TB, dir string) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{1})
	for name, n := range map[string]int64{"manifest.json": 700, "state": 64 << 10, "memory": benchMemory, "disk.raw": 64 << 10} {
		f, err := os.Create(filepath.Join(dir, name))
		if err == nil {
			_, err = io.CopyN(f, rng, n)
		}
		if err == nil && name == "disk.raw" {
			err = f.Truncate(benchMemory)
		}
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func waitReady(b testing.TB, s store.Store, key string) {
	poll.Eventually(b, 5*time.Minute, key+" Ready", func() error {
		st, err := s.Status(context.Background(), key)
		if err == nil && st.Remote != store.RemoteReady {
			err = fmt.Errorf("%s: %s", st.Remote, st.Message)
		}
		return err
	})
}

// hashDir reads and hashes every file of dir, as the check after the
// download did.
func hashDir(b testing.TB, dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			b.Fatal(err)
		}
		h := sha256.New()
		_, err = io.CopyBuffer(h, f, make([]byte, 1<<20))
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}

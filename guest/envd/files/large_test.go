package files

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const largeSize = 50 << 20

// randomStream is n deterministic pseudo-random bytes made on the fly,
// so the test itself holds no large buffer.
type randomStream struct {
	rng  *rand.ChaCha8
	left int64
}

func (s *randomStream) Read(p []byte) (int, error) {
	if s.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, _ := s.rng.Read(p)
	s.left -= int64(n)
	return n, nil
}

// heapPeak samples the heap until stopped and reports the highest
// HeapAlloc seen.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// TestLargeRoundTrip uploads 50 MB as multipart (chunked, as the SDK
// sends it), downloads it, and checks the bytes and that neither side of
// the handler held the file in memory.
func TestLargeRoundTrip(t *testing.T) {
	e := newEnv(t, 0)
	want := sha256.New()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		part, err := mw.CreateFormFile("file", "/data/large.bin")
		if err == nil {
			src := &randomStream{rng: rand.NewChaCha8([32]byte{7}), left: largeSize}
			_, err = io.Copy(io.MultiWriter(part, want), src)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stop := heapPeak()
	code, _, reply := e.do(t, "POST", "", pr, map[string]string{"Content-Type": mw.FormDataContentType()})
	wantStatus(t, code, 200, reply)
	got := sha256.New()
	n := download(t, e.url+"?path=/data/large.bin", got)
	peak := stop()

	if n != largeSize || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("downloaded %d bytes, sha256 match %v", n, bytes.Equal(got.Sum(nil), want.Sum(nil)))
	}
	if fi, err := os.Stat(filepath.Join(e.dir, "data/large.bin")); err != nil || fi.Size() != largeSize {
		t.Fatalf("file on disk: %v %v", fi, err)
	}
	if growth := int64(peak) - int64(base.HeapAlloc); growth > 16<<20 {
		t.Fatalf("heap grew by %d MB during a 50 MB round trip: the file was buffered", growth>>20)
	}
}

func download(t *testing.T, u string, into io.Writer) int64 {
	t.Helper()
	resp, err := rawClient.Get(u)
	must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET status %d", resp.StatusCode)
	}
	n, err := io.Copy(into, resp.Body)
	must(t, err)
	return n
}

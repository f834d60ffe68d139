// Package minio runs a real MinIO server: the local cluster's s3 store
// (internal/cluster, `make up`), and one on 127.0.0.1 for the s3 store's
// tests. The binary comes from hack/minio-bins.sh (built from the Go module
// proxy into $SANDLOT_CACHE/minio/<version>/minio).
package minio

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	s3 "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// Version is the MinIO module version hack/minio-bins.sh builds.
const Version = "v0.0.0-20260212201848-7aac2a2c5b7c"

// Fixed test credentials.
const (
	AccessKey = "sandlot-test"
	SecretKey = "sandlot-test-secret"
	Region    = "us-east-1"
)

// Server is one MinIO process with its own data dir.
type Server struct {
	// Endpoint is host:port (plain HTTP).
	Endpoint string
	// Bucket was created at Start.
	Bucket string

	t       T
	bin     string
	dataDir string
	logPath string
	console string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

var bucketSeq atomic.Int64

// Binary is the MinIO server binary's path in the cache.
func Binary() string {
	cache := os.Getenv("SANDLOT_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "sandlot")
	}
	return filepath.Join(cache, "minio", Version, "minio")
}

// T is what the server needs of a test: testing.TB, or crienv.T for a
// TestMain or a benchmark command.
type T interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Start runs MinIO on free 127.0.0.1 ports with a temp data dir, waits
// until it is ready, creates a bucket, and stops it in t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartIn(t, t.TempDir())
}

// StartIn is Start with its data and log under dir.
func StartIn(t T, dir string) *Server { return StartOn(t, dir, "127.0.0.1") }

// StartOn is StartIn listening on ip: an address pods reach (a cluster's
// bridge), not only this host.
func StartOn(t T, dir, ip string) *Server {
	t.Helper()
	bin := Binary()
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("minio: server binary %s missing: run hack/minio-bins.sh", bin)
	}
	s := &Server{t: t, bin: bin, dataDir: filepath.Join(dir, "data"), Endpoint: freeAddr(t, ip), console: freeAddr(t, ip)}
	s.logPath = filepath.Join(dir, "minio.log")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("minio: %v", err)
	}
	t.Cleanup(s.Stop)
	s.start()
	s.Bucket = s.NewBucket(t)
	return s
}

// freeAddr picks a free port; MinIO binds it right after, and the
// console gets one too (the default :9001 collides between test
// packages running in parallel).
func freeAddr(t T, ip string) string {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("minio: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (s *Server) start() {
	s.t.Helper()
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatalf("minio: log: %v", err)
	}
	cmd := exec.Command(s.bin, "server", s.dataDir, "--address", s.Endpoint, "--console-address", s.console, "--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+AccessKey, "MINIO_ROOT_PASSWORD="+SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_REGION="+Region,
		"MINIO_PROMETHEUS_AUTH_TYPE=public") // Requests reads the request counters
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C of the test does not reach it first,
	// and Stop signals exactly this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("minio: start %s: %v", s.bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	s.waitReady(done)
}

// waitReady polls /minio/health/ready (a second on an idle machine).
func (s *Server) waitReady(done chan struct{}) {
	s.t.Helper()
	url := "http://" + s.Endpoint + "/minio/health/ready"
	err := poll.Within(60*time.Second, "minio: ready at "+url, func() error {
		select {
		case <-done:
			return poll.Stop(fmt.Errorf("minio: exited before ready"))
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		s.t.Fatalf("%v:\n%s", err, s.logTail())
	}
}

func (s *Server) logTail() string {
	data, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// Stop terminates MinIO (SIGTERM, then SIGKILL after 10 s); the data dir
// stays for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts MinIO again on the same address and data.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Client is a minio-go client for the server.
func (s *Server) Client() *s3.Client {
	s.t.Helper()
	c, err := s3.New(s.Endpoint, &s3.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, ""), Region: Region})
	if err != nil {
		s.t.Fatalf("minio: client: %v", err)
	}
	return c
}

// NewBucket creates a bucket of its own for t (tests sharing one server
// stay apart).
func (s *Server) NewBucket(t T) string {
	t.Helper()
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), bucketSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client().MakeBucket(ctx, name, s3.MakeBucketOptions{Region: Region}); err != nil {
		t.Fatalf("minio: make bucket %s: %v", name, err)
	}
	return name
}

// Objects lists the object names under prefix in bucket.
func (s *Server) Objects(t T, bucket, prefix string) []string {
	t.Helper()
	var names []string
	for o := range s.Client().ListObjects(context.Background(), bucket, s3.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("minio: list %s/%s: %v", bucket, prefix, o.Err)
		}
		names = append(names, o.Key)
	}
	return names
}

// Log is MinIO's output so far (for failure messages).
func (s *Server) Log() string {
	data, _ := os.ReadFile(s.logPath)
	return string(bytes.TrimSpace(data))
}

// Requests is how many S3 requests of one API (e.g. "GetObject",
// "PutObject") the server has answered since it started, from its
// Prometheus counters (the v3 endpoint: v2's cluster and node metrics are
// served from a cache for seconds): the proof that data came from it.
func (s *Server) Requests(t T, api string) int {
	t.Helper()
	resp, err := http.Get("http://" + s.Endpoint + "/minio/metrics/v3/api/requests")
	if err != nil {
		t.Fatalf("minio: metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("minio: metrics: %s: %v", resp.Status, err)
	}
	n := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "minio_api_requests_total{") || !strings.Contains(line, `name="`+api+`"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("minio: metrics line %q: %v", line, err)
		}
		n += v
	}
	return int(n)
}

// Running reports whether the server process runs (not Stopped).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

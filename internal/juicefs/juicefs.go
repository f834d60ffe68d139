// Package juicefs runs a live JuiceFS: the local cluster's juicefs store
// (internal/cluster mounts it through the JuiceFS CSI driver), and the one
// the juicefs store's tests (test/juicefs) mount directly. A Redis (Debian's
// redis-server) is the metadata engine, a bucket on a real MinIO
// (internal/minio) the object storage, and each node has one JuiceFS client
// mount with its own cache and writeback staging — what a node's JuiceFS CSI
// mount is. The client comes from hack/juicefs-bins.sh (JuiceFS v1.2.5 built
// from upstream's sources into the cache).
package juicefs

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandlot-dev/sandlot/internal/minio"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// Version is the JuiceFS release hack/juicefs-bins.sh builds.
const Version = "v1.2.5"

// VolumeName is the volume's name: its objects are "<name>/chunks/...".
const VolumeName = "sandlot"

// T is what the volume needs of a test: testing.TB, or crienv.T.
type T interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// Binary is the juicefs client's path in the cache.
func Binary() string {
	cache := os.Getenv("SANDLOT_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "sandlot")
	}
	return filepath.Join(cache, "juicefs", Version, "juicefs")
}

// Volume is a formatted JuiceFS volume: its Redis and its bucket.
type Volume struct {
	MetaURL string // redis://127.0.0.1:<port>/1
	UUID    string
	S3      *minio.Server
	Bucket  string

	t   T
	dir string
	bin string

	mu    sync.Mutex
	redis *process
	host  string
	port  string
	pass  string
}

// Start runs Redis under dir, makes a bucket on s3 and formats a volume
// on them; t's cleanups stop it all.
func Start(t T, dir string, s3 *minio.Server) *Volume {
	t.Helper()
	return StartOn(t, dir, s3, "127.0.0.1")
}

// StartOn is Start with Redis listening on host (an address pods reach,
// for a volume the JuiceFS CSI driver mounts).
func StartOn(t T, dir string, s3 *minio.Server, host string) *Volume {
	t.Helper()
	bin := Binary()
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("juicefs: client %s missing: run hack/juicefs-bins.sh", bin)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("juicefs: redis-server missing (JuiceFS's metadata engine): run hack/deps.sh (apt-get install redis-server)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("juicefs: %v", err)
	}
	// A password: Redis refuses other hosts without one (protected mode),
	// and pods on the bridge are other hosts.
	v := &Volume{S3: s3, Bucket: s3.NewBucket(t), t: t, dir: dir, bin: bin, host: host, port: freePort(t, host), pass: rand.Text()}
	v.MetaURL = "redis://:" + v.pass + "@" + net.JoinHostPort(host, v.port) + "/1"
	v.startRedis()
	t.Cleanup(v.stopRedis)
	v.run("format", "--storage", "minio", "--bucket", "http://"+s3.Endpoint+"/"+v.Bucket,
		"--access-key", minio.AccessKey, "--secret-key", minio.SecretKey, "--trash-days", "0", v.MetaURL, VolumeName)
	var st struct{ Setting struct{ UUID string } }
	if err := json.Unmarshal(v.run("status", v.MetaURL), &st); err != nil || st.Setting.UUID == "" {
		t.Fatalf("juicefs status: no UUID (%v)", err)
	}
	v.UUID = st.Setting.UUID
	return v
}

// run runs the client and returns its stdout; a failure is fatal.
func (v *Volume) run(args ...string) []byte {
	v.t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(v.bin, append([]string{"--log-level", "warn"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		v.t.Fatalf("juicefs %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes()
}

func freePort(t T, host string) string {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("juicefs: free port: %v", err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

func (v *Volume) startRedis() {
	v.t.Helper()
	p := start(v.t, filepath.Join(v.dir, "redis.log"), "redis-server", "--port", v.port, "--bind", v.host, "--requirepass", v.pass,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", v.dir)
	addr := net.JoinHostPort(v.host, v.port)
	err := poll.Within(30*time.Second, "redis on "+addr, func() error {
		if p.exited() {
			return poll.Stop(fmt.Errorf("redis-server exited:\n%s", p.logTail()))
		}
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		v.t.Fatalf("juicefs: %v", err)
	}
	v.mu.Lock()
	v.redis = p
	v.mu.Unlock()
}

func (v *Volume) stopRedis() {
	v.mu.Lock()
	p := v.redis
	v.redis = nil
	v.mu.Unlock()
	if p != nil {
		p.stop(syscall.SIGTERM)
	}
}

// RestartRedis stops the metadata engine and starts it again on the same
// port and data (its append-only file): the clients reconnect.
func (v *Volume) RestartRedis() {
	v.t.Helper()
	v.stopRedis()
	v.startRedis()
}

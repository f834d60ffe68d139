package juicefs

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// Mount is one node's JuiceFS client: the volume mounted with --writeback
// (the store needs it), its own cache and staging, its metrics endpoint.
type Mount struct {
	Dir        string // the mountpoint
	CacheDir   string
	StagingDir string // <cache-dir>/<UUID>/rawstaging
	MetricsURL string
	Log        string

	v *Volume
	p *process
}

// Mount mounts the volume for node name under the volume's directory,
// with extra mount flags (e.g. --prefetch=16); t's cleanups unmount it.
func (v *Volume) Mount(name string, extra ...string) *Mount {
	v.t.Helper()
	base := filepath.Join(v.dir, name)
	m := &Mount{Dir: filepath.Join(base, "mnt"), CacheDir: filepath.Join(base, "cache"), Log: filepath.Join(base, "juicefs.log"), v: v}
	m.StagingDir = filepath.Join(m.CacheDir, v.UUID, "rawstaging")
	metrics := "127.0.0.1:" + freePort(v.t, "127.0.0.1")
	m.MetricsURL = "http://" + metrics + "/metrics"
	for _, d := range []string{m.Dir, m.CacheDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			v.t.Fatalf("juicefs: %v", err)
		}
	}
	// Foreground, as a child: its log and lifetime are the test's.
	args := append([]string{"mount", "--writeback", "--upload-delay", "0", "--cache-dir", m.CacheDir,
		"--metrics", metrics, "--no-usage-report", "--no-bgjob"}, extra...)
	m.p = start(v.t, m.Log, v.bin, append(args, v.MetaURL, m.Dir)...)
	v.t.Cleanup(m.Unmount)
	err := poll.Within(60*time.Second, "juicefs mounted on "+m.Dir, func() error {
		if m.p.exited() {
			return poll.Stop(fmt.Errorf("juicefs mount exited:\n%s", m.p.logTail()))
		}
		if !mounted(m.Dir) {
			return fmt.Errorf("not mounted yet")
		}
		return nil
	})
	if err != nil {
		v.t.Fatalf("juicefs: %v", err)
	}
	return m
}

// Unmount unmounts (forcibly: a test may leave files open) and waits for
// the client to exit.
func (m *Mount) Unmount() {
	if m.p.exited() {
		return
	}
	if out, err := exec.Command(m.v.bin, "umount", "--force", m.Dir).CombinedOutput(); err != nil {
		m.v.t.Logf("juicefs umount %s: %v: %s", m.Dir, err, out)
	}
	m.p.stop(syscall.SIGTERM)
}

// mounted: dir is a JuiceFS FUSE mountpoint in this mount namespace.
func mounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts ... - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && fields[4] == dir && strings.Contains(sc.Text(), " - fuse.juicefs ") {
			return true
		}
	}
	return false
}

// process is a child in its own process group with its output in a log.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func start(t T, log, bin string, args ...string) *process {
	t.Helper()
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("juicefs: log: %v", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("juicefs: start %s: %v", bin, err)
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { cmd.Wait(); f.Close(); close(p.done) }()
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop signals the process group (juicefs mount runs a supervisor and
// the client), then kills it after 15 s.
func (p *process) stop(sig syscall.Signal) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (p *process) logTail() string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// Metric sums the client's samples of name whose labels contain match
// (e.g. `method="GET"`; "" for all).
func (m *Mount) Metric(name, match string) (float64, error) { return Metric(m.MetricsURL, name, match) }

// Metric sums the samples of name whose labels contain match at a JuiceFS
// client's metrics endpoint url.
func Metric(url, name, match string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, fmt.Errorf("juicefs metrics: %w", err)
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") || !strings.Contains(line, match) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("juicefs metrics: %q: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("juicefs metrics: no %s{%s} at %s", name, match, url)
	}
	return sum, sc.Err()
}

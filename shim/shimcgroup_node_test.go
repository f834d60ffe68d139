package shim

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// hogEnv makes the test binary a process that, once told on stdin, takes
// more memory than its cgroup's cap: a flooded shim.
const hogEnv = "SANDLOT_SHIM_TEST_HOG"

func TestMain(m *testing.M) {
	if os.Getenv(hogEnv) != "" {
		hog()
		return
	}
	os.Exit(m.Run())
}

var hogged [][]byte

func hog() {
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		os.Exit(2)
	}
	for range 64 { // 256 MiB, every page touched
		b := make([]byte, 4<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hogged = append(hogged, b)
	}
	fmt.Println("survived")
	os.Exit(0)
}

// nodeCgroups is a test's own cgroups on the node's memory hierarchy:
// base (sandlot-shimtest-<pid>) holds origin, standing in for containerd's
// cgroup, and the shims' parent. It skips where the node's cgroupfs is
// not this test's to write (not root, read-only, no memory controller).
type nodeCgroups struct {
	h      memHierarchy // self: origin
	base   string
	parent string // relative to the mount, as newShimCgroup takes it
	procs  []*exec.Cmd
}

func newNodeCgroups(t *testing.T) *nodeCgroups {
	if os.Geteuid() != 0 {
		t.Skip("not root: the node's cgroups are not the test's to write")
	}
	h, err := readMemHierarchy()
	if err != nil || h.root != "/" {
		t.Skipf("no usable memory hierarchy (%v, root %q)", err, h.root)
	}
	n := &nodeCgroups{h: h, base: filepath.Join(h.mount, fmt.Sprintf("sandlot-shimtest-%d", os.Getpid()))}
	n.parent = filepath.Join(filepath.Base(n.base), shimCgroupParent)
	if err := os.Mkdir(n.base, 0o755); err != nil {
		t.Skipf("the memory hierarchy at %s is not writable here: %v", h.mount, err)
	}
	t.Cleanup(n.cleanup)
	if h.v2 {
		if err := enableMemory(h.mount, n.base); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(n.base, "origin"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.h.self = "/" + filepath.Join(filepath.Base(n.base), "origin")
	t.Logf("memory hierarchy %s (v2 %v), test cgroups in %s", h.mount, h.v2, n.base)
	return n
}

// start starts cmd in origin (as containerd starts a shim in its own).
func (n *nodeCgroups) start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, cmd)
	if err := writeCgroup(n.h.dir(n.h.self), "cgroup.procs", strconv.Itoa(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
}

func (n *nodeCgroups) cleanup() {
	for _, c := range n.procs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	// Leaves first; removeCgroups waits for the killed to be gone.
	ents, _ := os.ReadDir(filepath.Join(n.h.mount, n.parent))
	var dirs []string
	for _, e := range ents {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(n.h.mount, n.parent, e.Name()))
		}
	}
	dirs = append(dirs, filepath.Join(n.h.mount, n.parent), filepath.Join(n.base, "origin"), n.base)
	if err := removeCgroups(dirs); err != nil {
		fmt.Fprintln(os.Stderr, "test cgroups left:", err)
	}
}

// memoryCgroup is pid's cgroup in the memory hierarchy.
func (n *nodeCgroups) memoryCgroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := memCgroupOf(string(b), n.h.v2)
	if !ok {
		t.Fatalf("process %d has no memory cgroup: %s", pid, b)
	}
	return p
}

// TestShimCgroupOnNode moves a process (sleep, standing in for the shim)
// into a capped cgroup on the node's real hierarchy and back out.
func TestShimCgroupOnNode(t *testing.T) {
	n := newNodeCgroups(t)
	sleep := exec.Command("sleep", "60")
	n.start(t, sleep)
	pid := sleep.Process.Pid
	g, err := newShimCgroup(n.h, n.parent, "sbx1", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.join(pid); err != nil {
		t.Fatal(err)
	}
	want := "/" + filepath.Join(n.parent, "sbx1")
	if got := n.memoryCgroup(t, pid); got != want {
		t.Fatalf("sleep's memory cgroup %s, want %s", got, want)
	}
	limit := filepath.Join(g.dir, map[bool]string{true: "memory.max", false: "memory.limit_in_bytes"}[n.h.v2])
	wantFiles(t, map[string]string{limit: "67108864", filepath.Join(g.dir, "cgroup.procs"): strconv.Itoa(pid)})

	shortRecap(t)
	done := g.lift()
	if b, _ := os.ReadFile(limit); strings.TrimSpace(string(b)) == "67108864" {
		t.Error("lifted, the cap is still on")
	}
	done()
	eventuallyFile(t, limit, "67108864")

	if err := g.leave(pid); err != nil {
		t.Fatal(err)
	}
	if got := n.memoryCgroup(t, pid); got != n.h.self {
		t.Errorf("after leave: %s, want back in %s", got, n.h.self)
	}
	if _, err := os.Stat(g.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the shim's cgroup is still there: %v", err)
	}
}

// TestShimCgroupOOMKillsOnlyTheShim: a process over its shim cgroup's cap
// is OOM-killed; a neighbour in the cgroup it came from is not.
func TestShimCgroupOOMKillsOnlyTheShim(t *testing.T) {
	n := newNodeCgroups(t)
	neighbour := exec.Command("sleep", "60")
	n.start(t, neighbour)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hog := exec.Command(self)
	hog.Env = append(os.Environ(), hogEnv+"=1")
	stdin, _ := hog.StdinPipe()
	stdout, _ := hog.StdoutPipe()
	n.start(t, hog)
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("hog: %q, %v", line, err)
	}
	g, err := newShimCgroup(n.h, n.parent, "sbx1", 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.join(hog.Process.Pid); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go")
	line, _ := out.ReadString('\n')
	err = hog.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("hog over a 32 MiB cap: %v (said %q), want OOM-killed", err, line)
	}
	if !oomKilled([]string{g.dir}) {
		t.Error("the shim cgroup records no OOM kill")
	}
	if err := unix.Kill(neighbour.Process.Pid, 0); err != nil {
		t.Errorf("the neighbour in the origin cgroup: %v", err)
	}
	if err := removeCgroups([]string{g.dir}); err != nil {
		t.Error(err)
	}
}

// TestSetOOMScoreAdj: the score lands on the process named.
func TestSetOOMScoreAdj(t *testing.T) {
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	if err := setOOMScoreAdj(sleep.Process.Pid, 937); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, map[string]string{fmt.Sprintf("/proc/%d/oom_score_adj", sleep.Process.Pid): "937"})
}

package shim

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"
)

// The shim's own cgroup.
//
// containerd starts each pod's shim in its own cgroup, and the shim keeps
// nearly containerd's OOM score (shim.AdjustOOMScore): left there, a shim
// that grows (a guest flooding an event stream whose host reader is slow)
// takes memory from the node, not from its pod. So the shim moves itself,
// as soon as it learns its pod (the pause container's Create, before the
// VM exists; `start` cannot log, and has no config before that), into a
// cgroup of its own whose memory.max (v1: memory.limit_in_bytes) is the
// node's shimMemoryMaxMiB. memory.oom.group stays 0: a shim over its cap is
// OOM-killed alone, containerd's `shim delete` cleans up after it (the VM
// is killed, the pod restarts), and nothing else on the node pays.
//
// Where: <hierarchy root>/sandlot-shims/<sandbox id>, beside containerd's
// own cgroup and outside kubepods (as Kata's kata_overhead), not a leaf
// beside the VM's cgroup in the pod's (on v2 it could only be a leaf: no
// process may sit in the pod's cgroup itself, which has children):
//   - the kubelet, when it removes a pod's cgroup, SIGKILLs every process
//     left anywhere below it; the shim answers containerd (the sandbox's
//     Delete, Shutdown, exit events) around the pod's end and must not be
//     one of them;
//   - the shim is charged for the bulk I/O it does for its pod: a snapshot
//     copies the guest's RAM (on a JuiceFS store into a tmpfs staging
//     directory: unreclaimable), a restore copies the disk layer. In the
//     pod's cgroup, sized for the VM plus the RuntimeClass overhead, that
//     would OOM-kill QEMU mid-snapshot.
//
// During that bulk work (boot, restore, snapshot, a base disk's build) the
// cap is lifted; after it, a limit that only comes down brings it back as
// the page cache left is written back and reclaimed (lift, recap): the cap
// bounds the shim's steady state, which is what a flooding guest grows.
// The shim leaves and removes its cgroup when it exits; containerd's
// `shim delete` removes the cgroup of one that died.

// shimCgroupParent holds every shim's cgroup, below the hierarchy's root.
const shimCgroupParent = "sandlot-shims"

// recapEvery paces recap's tries.
var recapEvery = 5 * time.Second

// memHierarchy is the mounted cgroup hierarchy with the memory controller
// (v2's, or v1's memory hierarchy) and this process's cgroup in it.
type memHierarchy struct {
	mount string // where it is mounted
	root  string // the mount's root in the hierarchy (mountinfo's 4th field)
	v2    bool
	self  string // this process's cgroup (/proc/self/cgroup)
}

// dir is the directory of cgroup path p (a /proc/<pid>/cgroup path).
func (h memHierarchy) dir(p string) string {
	if h.root != "/" && (p == h.root || strings.HasPrefix(p, h.root+"/")) {
		p = strings.TrimPrefix(p, h.root)
	}
	return filepath.Join(h.mount, p)
}

func readMemHierarchy() (memHierarchy, error) {
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return memHierarchy{}, err
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return memHierarchy{}, err
	}
	return findMemHierarchy(string(mountinfo), string(self))
}

// findMemHierarchy picks the hierarchy from mountinfo (a hybrid node's
// cgroup2 mount has no controllers: memory is v1's) and this process's
// cgroup in it from self (/proc/self/cgroup).
func findMemHierarchy(mountinfo, self string) (memHierarchy, error) {
	h, ok := memMount(mountinfo)
	if !ok {
		return h, errors.New("no mounted cgroup hierarchy has the memory controller")
	}
	if h.self, ok = memCgroupOf(self, h.v2); !ok {
		return h, fmt.Errorf("this process has no cgroup in the hierarchy at %s", h.mount)
	}
	return h, nil
}

// memCgroupOf is the memory cgroup in a /proc/<pid>/cgroup.
func memCgroupOf(procCgroup string, v2 bool) (string, bool) {
	for _, line := range strings.Split(procCgroup, "\n") {
		id, rest, _ := strings.Cut(line, ":")
		ctrls, path, ok := strings.Cut(rest, ":")
		if ok && ((v2 && id == "0" && ctrls == "") || (!v2 && slices.Contains(strings.Split(ctrls, ","), "memory"))) {
			return path, true
		}
	}
	return "", false
}

func memMount(mountinfo string) (memHierarchy, bool) {
	for _, line := range strings.Split(mountinfo, "\n") {
		// ID parent major:minor root mountpoint options... - fstype source superoptions
		left, right, ok := strings.Cut(line, " - ")
		fields, fs := strings.Fields(left), strings.Fields(right)
		if !ok || len(fields) < 5 || len(fs) < 1 {
			continue
		}
		h := memHierarchy{mount: fields[4], root: fields[3]}
		switch {
		case fs[0] == "cgroup" && len(fs) >= 3 && slices.Contains(strings.Split(fs[2], ","), "memory"):
			return h, true
		case fs[0] == "cgroup2":
			b, _ := os.ReadFile(filepath.Join(h.mount, "cgroup.controllers"))
			if slices.Contains(strings.Fields(string(b)), "memory") {
				h.v2 = true
				return h, true
			}
		}
	}
	return memHierarchy{}, false
}

// shimCgroup is a shim process's own cgroup in the memory hierarchy.
type shimCgroup struct {
	dir    string
	origin string // the cgroup the shim came from: where it goes to leave
	v2     bool
	max    int64 // the cap, bytes

	// goLimit: the Go runtime's soft memory limit follows the cap (the
	// shim's own cgroup; not a test's).
	goLimit bool

	mu    sync.Mutex
	lifts int  // bulk operations under way (the cap is off while > 0)
	gen   int  // bumped by every lift and by leave: an older recap stops
	left  bool // the shim left it: nothing more to write
}

// newShimCgroup makes <mount>/<parent>/<id> with its cap (the caller
// removes g.dir if it returns g with an error).
func newShimCgroup(h memHierarchy, parent, id string, maxBytes int64) (*shimCgroup, error) {
	if id == "" || filepath.Base(id) != id || strings.HasPrefix(id, ".") {
		return nil, fmt.Errorf("shim cgroup: unusable id %q", id)
	}
	g := &shimCgroup{dir: filepath.Join(h.mount, parent, id), origin: h.dir(h.self), v2: h.v2, max: maxBytes}
	if !h.v2 {
		if err := makeCgroup(g.dir); err != nil {
			return nil, err
		}
		return g, g.writeLimit(maxBytes)
	}
	// Not makeCgroup: the leaf gets the memory controller only (no
	// cpuset.cpus to copy into).
	if err := enableMemory(h.mount, filepath.Join(h.mount, parent)); err != nil {
		return nil, err
	}
	if err := os.Mkdir(g.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup %s: %w", g.dir, err)
	}
	// Where swap is accounted, none: the cap is the shim's whole use.
	_ = writeCgroup(g.dir, "memory.swap.max", "0")
	return g, g.writeLimit(maxBytes)
}

// enableMemory has every cgroup from the hierarchy's root down to parent
// (made if missing) hand the memory controller to its children: v2
// enables a controller level by level (runc does the same for a
// container's path).
func enableMemory(mount, parent string) error {
	rel, err := filepath.Rel(mount, parent)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("shim cgroup: %s is not below %s", parent, mount)
	}
	dir := mount
	levels := []string{mount}
	for _, name := range strings.Split(rel, "/") {
		if name != "." {
			dir = filepath.Join(dir, name)
			levels = append(levels, dir)
		}
	}
	for _, d := range levels {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
		if slices.Contains(strings.Fields(string(b)), "memory") {
			continue
		}
		if err := writeCgroup(d, "cgroup.subtree_control", "+memory"); err != nil {
			return err
		}
	}
	return nil
}

// writeLimit sets the cgroup's memory limit: n bytes, or none if n ≤ 0.
func (g *shimCgroup) writeLimit(n int64) error {
	file, v := "memory.limit_in_bytes", "-1"
	if g.v2 {
		file, v = "memory.max", "max"
	}
	if n > 0 {
		v = strconv.FormatInt(n, 10)
	}
	return writeCgroup(g.dir, file, v)
}

// join moves process pid (all its threads) into the cgroup.
func (g *shimCgroup) join(pid int) error {
	return writeCgroup(g.dir, "cgroup.procs", strconv.Itoa(pid))
}

// leave moves pid back where it came from and removes the cgroup (the
// kernel removes no cgroup a process is in).
func (g *shimCgroup) leave(pid int) error {
	g.mu.Lock()
	g.gen++ // no recap after this
	g.left = true
	g.mu.Unlock()
	if err := writeCgroup(g.origin, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return err
	}
	return removeCgroups([]string{g.dir})
}

// lift takes the cap off for bulk I/O the shim does for its pod (the page
// cache and tmpfs pages it writes are charged to it); the returned func
// ends it. The cap comes back once no lift is left (recap). A nil g lifts
// nothing.
func (g *shimCgroup) lift() func() {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	if g.lifts++; g.lifts == 1 && !g.left {
		if err := g.writeLimit(0); err != nil {
			log.L.WithError(err).Warn("shim memory cap: lift for bulk I/O")
		}
		g.setGoLimit(false)
	}
	var once sync.Once
	return func() { once.Do(g.unlift) }
}

func (g *shimCgroup) unlift() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lifts--; g.lifts == 0 && !g.left {
		go g.recap(g.gen, recapEvery)
	}
}

// setGoLimit has the GC work harder as the shim nears its cap (transient
// garbage would otherwise get it killed), or not (capped: false).
func (g *shimCgroup) setGoLimit(capped bool) {
	switch {
	case !g.goLimit:
	case capped:
		debug.SetMemoryLimit(g.max / 4 * 3)
	default:
		debug.SetMemoryLimit(math.MaxInt64)
	}
}

// recap puts the cap back without killing what the bulk I/O left (page
// cache not yet written back: on v2 a memory.max below the cgroup's use
// OOM-kills when reclaim falls short; v1 refuses with EBUSY). While the
// cgroup holds more than the cap, its limit is what it holds plus one cap,
// and only ever comes down, try after try, to the cap; v2 also reclaims
// through memory.high, which never kills. A flood that began during the
// lift meets that limit and is OOM-killed there.
func (g *shimCgroup) recap(gen int, every time.Duration) {
	var limit int64 // none yet
	for {
		next, done, err := g.recapOnce(gen, limit)
		if err != nil {
			log.L.WithError(err).Error("shim memory cap: NOT restored after bulk I/O")
		}
		if done || err != nil {
			return
		}
		limit = next
		time.Sleep(every)
	}
}

// recapOnce is one try: the limit it set, and whether the cap is back (or
// a later recap took over).
func (g *shimCgroup) recapOnce(gen int, limit int64) (int64, bool, error) {
	if g.v2 {
		_ = writeCgroup(g.dir, "memory.high", strconv.FormatInt(g.max, 10))
		_ = writeCgroup(g.dir, "memory.high", "max")
	}
	use := g.usage()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gen != gen || g.lifts > 0 || g.left {
		return limit, true, nil // lifted again (or left)
	}
	next := g.max
	if use > g.max {
		next = use + g.max
	}
	if limit > 0 && limit < next {
		next = limit
	}
	if err := g.writeLimit(next); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return limit, false, nil // v1, over it again: next try
		}
		return limit, false, err
	}
	if next == g.max {
		g.setGoLimit(true)
	}
	return next, next == g.max, nil
}

// usage is the cgroup's memory use in bytes (0 if unreadable).
func (g *shimCgroup) usage() int64 {
	file := "memory.usage_in_bytes"
	if g.v2 {
		file = "memory.current"
	}
	b, _ := os.ReadFile(filepath.Join(g.dir, file))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

func writeCgroup(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup %s: write %s %q: %w", dir, file, value, err)
	}
	return nil
}

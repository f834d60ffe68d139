package shim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFindMemHierarchy(t *testing.T) {
	v2 := t.TempDir()
	writeFiles(t, v2, map[string]string{"cgroup.controllers": "cpuset cpu io memory pids"})
	unified := t.TempDir() // a hybrid node's cgroup2: no controllers
	writeFiles(t, unified, map[string]string{"cgroup.controllers": ""})
	for _, tc := range []struct {
		name, mountinfo, self string
		want                  memHierarchy
		wantErr               bool
	}{
		{name: "v2", mountinfo: "31 23 0:27 / " + v2 + " rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
			self: "0::/system.slice/containerd.service\n",
			want: memHierarchy{mount: v2, root: "/", v2: true, self: "/system.slice/containerd.service"}},
		{name: "hybrid: memory is v1's", mountinfo: "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n" +
			"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
			"41 31 0:38 / " + unified + " rw,relatime - cgroup2 cgroup2 rw\n",
			self: "9:name=systemd:/system.slice/containerd.service\n4:memory:/system.slice/containerd.service\n0::/system.slice/containerd.service\n",
			want: memHierarchy{mount: "/sys/fs/cgroup/memory", root: "/", self: "/system.slice/containerd.service"}},
		{name: "v1, co-mounted", mountinfo: "35 31 0:32 / /sys/fs/cgroup/memory,cpu rw - cgroup cgroup rw,cpu,memory\n",
			self: "4:cpu,memory:/a\n", want: memHierarchy{mount: "/sys/fs/cgroup/memory,cpu", root: "/", self: "/a"}},
		{name: "no memory controller", mountinfo: "41 31 0:38 / " + unified + " rw - cgroup2 cgroup2 rw\n", self: "0::/\n", wantErr: true},
		{name: "not in it", mountinfo: "35 31 0:32 / /m rw - cgroup cgroup rw,memory\n", self: "0::/\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findMemHierarchy(tc.mountinfo, tc.self)
			if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
				t.Fatalf("got %+v, %v; want %+v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestMemHierarchyDir(t *testing.T) {
	h := memHierarchy{mount: "/sys/fs/cgroup/memory", root: "/docker/abc"}
	if got := h.dir("/docker/abc/system.slice/x"); got != "/sys/fs/cgroup/memory/system.slice/x" {
		t.Errorf("below the mount's root: %s", got)
	}
	h.root = "/"
	if got := h.dir("/system.slice/x"); got != "/sys/fs/cgroup/memory/system.slice/x" {
		t.Errorf("mounted at the root: %s", got)
	}
}

func TestShimMemoryMaxMiB(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		in      *int
		want    int
		wantErr bool
	}{{nil, 128, false}, {n(0), 0, false}, {n(256), 256, false}, {n(64), 64, false},
		{n(10), 64, true}, {n(-1), 128, true}} {
		got, err := shimMemoryMaxMiB(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%v: %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestShimCgroupV2: the files a v2 shim cgroup writes, on a directory
// standing in for the hierarchy.
func TestShimCgroupV2(t *testing.T) {
	mount := t.TempDir()
	writeFiles(t, mount, map[string]string{"cgroup.subtree_control": "cpu io", "origin/cgroup.procs": ""})
	h := memHierarchy{mount: mount, root: "/", v2: true, self: "/origin"}
	g, err := newShimCgroup(h, shimCgroupParent, "sbx1", 128<<20)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mount, shimCgroupParent, "sbx1")
	wantFiles(t, map[string]string{
		filepath.Join(mount, "cgroup.subtree_control"):                   "+memory",
		filepath.Join(mount, shimCgroupParent, "cgroup.subtree_control"): "+memory",
		filepath.Join(dir, "memory.max"):                                 "134217728",
		filepath.Join(dir, "memory.swap.max"):                            "0",
	})
	if err := g.join(4242); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, map[string]string{filepath.Join(dir, "cgroup.procs"): "4242"})
	if _, err := os.Stat(filepath.Join(dir, "memory.oom.group")); err == nil {
		t.Error("memory.oom.group written: only the shim is to die")
	}
	// The cap is off while bulk I/O runs, on again once memory fits.
	shortRecap(t)
	writeFiles(t, dir, map[string]string{"memory.current": strconv.Itoa(300 << 20)})
	done := g.lift()
	wantFiles(t, map[string]string{filepath.Join(dir, "memory.max"): "max"})
	done()
	done() // once
	// 300 MiB left over the cap: no kill, a limit of that plus the cap,
	// down to the cap once reclaim brought the use under it.
	eventuallyFile(t, filepath.Join(dir, "memory.max"), strconv.Itoa(300<<20+128<<20))
	writeFiles(t, dir, map[string]string{"memory.current": strconv.Itoa(100 << 20)})
	eventuallyFile(t, filepath.Join(dir, "memory.max"), "134217728")

	if err := g.leave(4242); err == nil || !strings.Contains(err.Error(), "remove cgroup") {
		t.Errorf("leave: %v, want only the stand-in's files left in the way", err)
	}
	wantFiles(t, map[string]string{filepath.Join(mount, "origin", "cgroup.procs"): "4242"})
}

// TestShimCgroupRecapRatchet: what bulk I/O left over the cap is not
// killed: the limit is the use plus one cap, and only comes down.
func TestShimCgroupRecapRatchet(t *testing.T) {
	mount := t.TempDir()
	h := memHierarchy{mount: mount, root: "/", v2: true, self: "/"}
	g, err := newShimCgroup(h, shimCgroupParent, "sbx1", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	shortRecap(t)
	limit := filepath.Join(g.dir, "memory.max")
	writeFiles(t, g.dir, map[string]string{"memory.current": strconv.Itoa(1 << 30)})
	g.lift()()
	eventuallyFile(t, limit, strconv.Itoa(1<<30+64<<20))
	writeFiles(t, g.dir, map[string]string{"memory.current": strconv.Itoa(2 << 30)}) // a flood
	for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		// (Empty: read while recap rewrites it.)
		if b, _ := os.ReadFile(limit); len(b) > 0 && string(b) != strconv.Itoa(1<<30+64<<20) {
			t.Fatalf("the limit went up to %s with the flood", b)
		}
	}
	writeFiles(t, g.dir, map[string]string{"memory.current": strconv.Itoa(100 << 20)})
	eventuallyFile(t, limit, strconv.Itoa(100<<20+64<<20))
	writeFiles(t, g.dir, map[string]string{"memory.current": strconv.Itoa(30 << 20)})
	eventuallyFile(t, limit, strconv.Itoa(64<<20))
}

// TestShimCgroupLiftDuringRecap: a lift while a recap waits wins.
func TestShimCgroupLiftDuringRecap(t *testing.T) {
	mount := t.TempDir()
	h := memHierarchy{mount: mount, root: "/", v2: true, self: "/"}
	g, err := newShimCgroup(h, shimCgroupParent, "sbx1", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	shortRecap(t)
	writeFiles(t, g.dir, map[string]string{"memory.current": strconv.Itoa(1 << 30)})
	g.lift()()
	second := g.lift()
	writeFiles(t, g.dir, map[string]string{"memory.current": "0"})
	time.Sleep(20 * time.Millisecond)
	wantFiles(t, map[string]string{filepath.Join(g.dir, "memory.max"): "max"})
	second()
	eventuallyFile(t, filepath.Join(g.dir, "memory.max"), "67108864")
}

func TestUncappedWithoutCgroup(t *testing.T) {
	if ownCgroup.Load() != nil {
		t.Fatal("the test binary is in a shim cgroup")
	}
	uncapped()()
}

func shortRecap(t *testing.T) {
	every := recapEvery
	recapEvery = time.Millisecond
	t.Cleanup(func() { recapEvery = every })
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		// Whole at once, as a cgroup file reads: a reader between a
		// truncate and a write saw "" (memory.current 0), and recap put
		// the cap back early (TestShimCgroupRecapRatchet failed 1 run in 6).
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
}

func wantFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for p, want := range files {
		if got, err := os.ReadFile(p); err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("%s: %q, %v; want %q", p, got, err, want)
		}
	}
}

func eventuallyFile(t *testing.T, p, want string) {
	t.Helper()
	eventually(t, p+" = "+want, func() bool {
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b)) == want
	})
}

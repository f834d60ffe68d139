package crienv

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

const testImage = "sandlot.test/busybox:1"

// TestRuncPod runs a pod with the runc handler on a real containerd: logs,
// exec, pod networking from the host, a containerd restart under a running
// container, and the cleanup of everything the pod and the Env made.
func TestRuncPod(t *testing.T) {
	before := hostPaths()
	e := Start(t, Options{Dir: t.TempDir()})

	begin := time.Now()
	digest := e.ImportImage(t, testImage, Image{
		Cmd:   []string{"/bin/sh", "-c", "echo hello; exec sleep 3600"},
		Files: map[string]File{"www/index.html": {Data: []byte("hi from the pod\n")}},
	})
	t.Logf("ImportImage: %v", time.Since(begin).Round(time.Millisecond))
	checkRepoDigest(t, e, digest)

	begin = time.Now()
	podID, cfg := e.RunPod(t, "pod1", "runc", nil)
	t.Logf("RunPodSandbox: %v", time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	ctrID := e.CreateStart(t, podID, cfg, "main", testImage, map[string]string{"GREETING": "hi"})
	t.Logf("CreateContainer+StartContainer: %v", time.Since(begin).Round(time.Millisecond))

	waitLog(t, ContainerLogPath(cfg, "main"), "hello")
	checkExec(t, e, ctrID)
	url := checkPodHTTP(t, e, podID, ctrID)

	shim := checkPodRunning(t, e)

	e.Restart(t)
	if !alive(shim) {
		t.Fatalf("shim %d died with containerd", shim)
	}
	if st := e.ContainerState(t, ctrID); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after restart: container state %v, want RUNNING", st)
	}
	if out, _, code := e.ExecSync(t, ctrID, "echo", "still here"); code != 0 || out != "still here\n" {
		t.Fatalf("exec after restart: %q, exit %d", out, code)
	}
	getBody(t, url)

	e.RemovePod(t, podID)
	checkPodGone(t, e)

	e.Stop()
	checkEnvGone(t, e, before, podID)
}

// TestStopCleansUp stops two Envs at once (distinct subnets) with their
// pods still running: one the normal way (pods removed through CRI), one
// after containerd crashed (processes killed, mounts detached by Stop).
func TestStopCleansUp(t *testing.T) {
	before := hostPaths()
	envs := []*Env{
		Start(t, Options{Dir: t.TempDir(), Subnet: "10.89.10.0/24"}),
		Start(t, Options{Dir: t.TempDir(), Subnet: "10.89.11.0/24"}),
	}
	pods := make([]string, len(envs))
	for i, e := range envs {
		e.ImportImage(t, testImage, Image{Cmd: []string{"sleep", "3600"}})
		podID, cfg := e.RunPod(t, fmt.Sprintf("pod%d", i), "runc", nil)
		e.CreateStart(t, podID, cfg, "main", testImage, nil)
		checkPodRunning(t, e)
		pods[i] = podID
	}
	envs[0].Stop()
	checkEnvGone(t, envs[0], before, pods[0])
	envs[1].killContainerd()
	envs[1].Stop()
	checkEnvGone(t, envs[1], before, pods[1])
	for _, e := range envs {
		if pids, err := e.Processes(); err != nil || len(pids) != 0 {
			t.Errorf("processes left: %v %v", pids, err)
		}
	}
}

func checkRepoDigest(t *testing.T, e *Env, digest string) {
	t.Helper()
	st, err := e.Images.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: testImage}})
	if err != nil || st.Image == nil {
		t.Fatalf("ImageStatus %s: %v %v", testImage, st, err)
	}
	want := "sandlot.test/busybox@" + digest
	if !slices.Contains(st.Image.RepoDigests, want) {
		t.Fatalf("RepoDigests %v, want %s", st.Image.RepoDigests, want)
	}
}

func waitLog(t *testing.T, path, want string) {
	t.Helper()
	poll.Eventually(t, 5*time.Second, fmt.Sprintf("log %s containing %q", path, want), func() error {
		if b, _ := os.ReadFile(path); !strings.Contains(string(b), want) {
			return fmt.Errorf("the log is %q", b)
		}
		return nil
	})
}

func checkExec(t *testing.T, e *Env, ctrID string) {
	t.Helper()
	if out, errOut, code := e.ExecSync(t, ctrID, "cat", "/etc/hostname"); code != 0 || out != "pod1\n" {
		t.Fatalf("cat /etc/hostname: %q (stderr %q), exit %d", out, errOut, code)
	}
	out, errOut, code := e.ExecSync(t, ctrID, "sh", "-c", "echo $GREETING; echo oops >&2; exit 3")
	if code != 3 || out != "hi\n" || errOut != "oops\n" {
		t.Fatalf("exit-3 exec: stdout %q stderr %q exit %d", out, errOut, code)
	}
}

// checkPodHTTP starts busybox httpd in the container and fetches a page
// from the host through the bridge; it returns the URL.
func checkPodHTTP(t *testing.T, e *Env, podID, ctrID string) string {
	t.Helper()
	ip := e.PodIP(t, podID)
	if !e.Subnet.Contains(net.ParseIP(ip)) {
		t.Fatalf("pod IP %s not in %s", ip, e.Subnet)
	}
	if _, errOut, code := e.ExecSync(t, ctrID, "httpd", "-p", "8080", "-h", "/www"); code != 0 {
		t.Fatalf("httpd: exit %d: %s", code, errOut)
	}
	url := "http://" + net.JoinHostPort(ip, "8080") + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := WaitHTTP(ctx, url); err != nil {
		t.Fatal(err)
	}
	getBody(t, url)
	return url
}

func getBody(t *testing.T, url string) {
	t.Helper()
	resp, err := directHTTP.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "hi from the pod\n" {
		t.Fatalf("GET %s: %d %q", url, resp.StatusCode, b)
	}
}

// checkPodRunning checks what checkPodGone expects to vanish is there: the
// shim, the pause and app processes, the netns mount under Dir and the veth
// on the bridge. It returns the shim's PID.
func checkPodRunning(t *testing.T, e *Env) int {
	t.Helper()
	pids, err := e.Processes()
	if err != nil {
		t.Fatal(err)
	}
	shim, others := 0, 0
	for _, pid := range pids {
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmd), "containerd-shim-runc-v2") {
			shim = pid
		} else {
			others++
		}
	}
	if shim == 0 || others < 2 {
		t.Fatalf("Processes() = %v: want the shim and at least pause and sleep", pids)
	}
	mounts, err := mountsUnder(e.Dir)
	if err != nil || !slices.ContainsFunc(mounts, func(m mountInfo) bool { return m.FSType == "nsfs" }) {
		t.Fatalf("no netns mount under %s: %v %v", e.Dir, mounts, err)
	}
	if ports, err := os.ReadDir(filepath.Join("/sys/class/net", e.Bridge, "brif")); err != nil || len(ports) != 1 {
		t.Fatalf("bridge %s ports: %v %v, want one veth", e.Bridge, ports, err)
	}
	return shim
}

func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !isZombie(stat)
}

// checkPodGone: after RemovePod no shim or container process, no mount
// (netns, overlay, shm), no veth on the bridge and no IPAM lease remain.
func checkPodGone(t *testing.T, e *Env) {
	t.Helper()
	err := poll.Within(5*time.Second, "no process left after RemovePod", func() error {
		pids, err := e.Processes()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) != 0 {
			return fmt.Errorf("processes %v", pids)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	mounts, err := mountsUnder(e.Dir)
	if err != nil || len(mounts) != 0 {
		t.Errorf("mounts left under %s after RemovePod: %v %v", e.Dir, mounts, err)
	}
	ports, err := os.ReadDir(filepath.Join("/sys/class/net", e.Bridge, "brif"))
	if err != nil || len(ports) != 0 {
		t.Errorf("bridge %s ports after RemovePod: %v %v", e.Bridge, ports, err)
	}
	leases, _ := filepath.Glob(filepath.Join(e.Dir, "cni", "ipam", e.Network, "1*"))
	if len(leases) != 0 {
		t.Errorf("IPAM leases left: %v", leases)
	}
}

// checkEnvGone: after Stop the host is as Start found it. Other tests
// (the shim's netns tests, another Env) may change the same places at the
// same time, so only what this Env could have made counts.
func checkEnvGone(t *testing.T, e *Env, before map[string]bool, podID string) {
	t.Helper()
	if _, err := net.InterfaceByName(e.Bridge); err == nil {
		t.Errorf("bridge %s still exists", e.Bridge)
	}
	if mounts, _ := mountsUnder(e.Dir); len(mounts) != 0 {
		t.Errorf("mounts left under %s: %v", e.Dir, mounts)
	}
	roots, err := cgroupRoots()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, e.CgroupParent)); err == nil {
			t.Errorf("cgroup %s left in %s", e.CgroupParent, r)
		}
	}
	for p := range hostPaths() {
		if !before[p] && ours(p, e, podID) {
			t.Errorf("left on the host: %s", p)
		}
	}
	if fwd, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); e.host.ipForward == "0" && !otherBridges(e.Bridge) && string(fwd) != "0\n" {
		t.Errorf("ip_forward is %q, was 0", fwd)
	}
}

// ours tells whether a new host path could come from this Env.
func ours(p string, e *Env, podID string) bool {
	switch {
	case p == "/run/netns" || strings.HasPrefix(p, "/run/netns/"):
		return strings.HasPrefix(filepath.Base(p), "cni-")
	case strings.HasPrefix(p, cniCacheDir+"/results/"):
		return strings.Contains(p, e.Network) || strings.Contains(p, podID)
	case p == cniCacheDir || strings.HasPrefix(p, cniCacheDir+"/"):
		return !otherBridges(e.Bridge)
	}
	return true // /run/containerd, /run/nri, CDI dirs: nobody else makes them
}

// hostPaths lists what containerd or CNI could leave outside Dir.
func hostPaths() map[string]bool {
	m := map[string]bool{}
	for _, p := range []string{"/run/containerd", "/run/netns", "/run/nri", "/var/run/cdi", "/etc/cdi", cniCacheDir} {
		_ = filepath.WalkDir(p, func(path string, _ os.DirEntry, err error) error {
			if err == nil {
				m[path] = true
			}
			return nil
		})
	}
	return m
}

// TestImageArchive checks the OCI archive without containerd: the same
// Image gives the same digest, and caller files override busybox's.
func TestImageArchive(t *testing.T) {
	dir := t.TempDir()
	img := Image{Cmd: []string{"/bin/sh"}, Files: map[string]File{"bin/ls": {Data: []byte("#!/bin/sh\n"), Mode: 0o755}}}
	d1, err := writeOCIArchive(filepath.Join(dir, "a.tar"), "sandlot.test/x:1", img)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := writeOCIArchive(filepath.Join(dir, "b.tar"), "sandlot.test/x:1", img)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || !strings.HasPrefix(d1, "sha256:") {
		t.Fatalf("digests %s %s: want equal sha256 digests", d1, d2)
	}
	files, err := img.rootfs()
	if err != nil {
		t.Fatal(err)
	}
	if f := files["bin/ls"]; f.Mode&os.ModeSymlink != 0 {
		t.Fatalf("bin/ls is the busybox symlink, want the caller's file")
	}
	if _, ok := files["bin/sh"]; !ok {
		t.Fatalf("no bin/sh applet link")
	}
	for _, bad := range []string{"busybox:1", "sandlot.test/x", "sandlot.test/x:1/y"} {
		if checkRef(bad) == nil {
			t.Errorf("checkRef(%q) accepted", bad)
		}
	}
}

// TestReimportKeepsOneDigest: importing a new build of an image under the
// same reference leaves one repo@digest name, the new one, so the old
// build's content can be collected (`make up` re-imports on every run).
func TestReimportKeepsOneDigest(t *testing.T) {
	e := Start(t, Options{Dir: t.TempDir()})
	first := e.ImportImage(t, testImage, Image{Cmd: []string{"/bin/true"}})
	second := e.ImportImage(t, testImage, Image{Cmd: []string{"/bin/false"}})
	if first == second {
		t.Fatalf("two different images imported with one digest %s", first)
	}
	out, err := e.ctrOutput(context.Background(), "images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	repo := strings.Split(testImage, ":")[0]
	var digests []string
	for _, name := range strings.Fields(out) {
		if strings.HasPrefix(name, repo+"@") {
			digests = append(digests, name)
		}
	}
	if want := []string{repo + "@" + second}; !slices.Equal(digests, want) {
		t.Errorf("digest names after a re-import: %v, want %v", digests, want)
	}
}

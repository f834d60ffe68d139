package isolation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	"github.com/sandlot-dev/sandlot/vm"
)

// qemu is a VM's host process as an escaped guest would find itself.
type qemu struct {
	pid, uid int
	files    []string // what its command line names: RAM, disks, sockets
	layer    string
}

// qemuOf finds the QEMU of the pod with that UID (its -name is pod-<uid>).
func qemuOf(t *testing.T, podUID string) qemu {
	t.Helper()
	var q qemu
	poll.Eventually(t, time.Minute, "QEMU of pod "+podUID, func() error {
		var ok bool
		if q, ok = findQEMU(podUID); !ok {
			return fmt.Errorf("no QEMU named pod-%s", podUID)
		}
		return nil
	})
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", q.pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			q.uid, _ = strconv.Atoi(f[1])
		}
	}
	return q
}

// findQEMU looks for the QEMU of the pod with that UID in /proc.
func findQEMU(podUID string) (qemu, bool) {
	pid, args, ok := sbxtest.FindQEMU(podUID)
	if !ok {
		return qemu{}, false
	}
	return parseQEMU(pid, args), true
}

// parseQEMU collects the host paths a QEMU command line names (read-only
// drives aside: a base disk is an image's, shared by design).
func parseQEMU(pid int, args []string) qemu {
	q := qemu{pid: pid}
	for _, a := range args {
		if strings.Contains(a, "readonly=on") {
			continue
		}
		for _, opt := range strings.Split(a, ",") {
			k, v, ok := strings.Cut(opt, "=")
			if !ok || !strings.HasPrefix(v, "/") {
				continue
			}
			switch k {
			case "mem-path", "path":
				q.files = append(q.files, v)
			case "file":
				q.files, q.layer = append(q.files, v), v
			}
		}
	}
	return q
}

// jailed is how a command run as a QEMU ended.
type jailed struct {
	out, stderr string
	code        int
}

// asQEMU runs the busybox applet argv[0] in q's mount namespace with q's
// uid and gid: what code that escaped into that QEMU could do. The jail of
// the image's QEMU holds none of the host's programs, so a static busybox
// is put where the jail sees it, the VM's own (writable) layer directory,
// as an escaped QEMU could write one. A non-zero exit is in the result;
// the error says nsenter could not be started at all.
func asQEMU(q qemu, argv ...string) (jailed, error) {
	bb, err := stageBusybox(q)
	if err != nil {
		return jailed{}, err
	}
	id := strconv.Itoa(q.uid)
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(q.pid), "--mount",
		"--setuid", id, "--setgid", id, "--", bb}, argv...)...)
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	r := jailed{out: out.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		r.code, err = exit.ExitCode(), nil
	}
	if err != nil {
		return r, fmt.Errorf("nsenter into QEMU %d: %w", q.pid, err)
	}
	return r, nil
}

// stageBusybox copies Debian's static busybox into q's layer directory
// (once) and names it there.
func stageBusybox(q qemu) (string, error) {
	if q.layer == "" {
		return "", fmt.Errorf("QEMU %d: no layer on its command line to put busybox beside", q.pid)
	}
	dst := filepath.Join(filepath.Dir(q.layer), "busybox")
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	b, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return "", fmt.Errorf("%w: run hack/deps.sh (Debian's busybox-static)", err)
	}
	return dst, os.WriteFile(dst, b, 0o755)
}

// refused is nil when tool itself ran in the jail and failed to open its
// file for one of whys: not when nsenter failed to get there, nor when
// the tool opened the file and failed on something else.
func (r jailed) refused(tool string, whys ...string) error {
	if r.code == 0 {
		return fmt.Errorf("exit 0: read %q", r.out)
	}
	if strings.HasPrefix(r.stderr, tool+": ") {
		for _, why := range whys {
			if strings.Contains(r.stderr, why) {
				return nil
			}
		}
	}
	return fmt.Errorf("exit %d, stderr %q: not %s refused the file (%s)", r.code, strings.TrimSpace(r.stderr), tool, strings.Join(whys, ", "))
}

// plainPod is a pod of the runtime class without any sandlot.dev key (a
// cold-booted microVM, as other operators run them), limited to memMiB.
func plainPod(name, ns, runtimeClass string, memMiB int64, cmd ...string) *corev1.Pod {
	mem := *resource.NewQuantity(memMiB<<20, resource.BinarySI)
	req := corev1.ResourceList{corev1.ResourceMemory: mem, corev1.ResourceCPU: resource.MustParse("100m")}
	lim := corev1.ResourceList{corev1.ResourceMemory: mem, corev1.ResourceCPU: resource.MustParse("1")} // 1 vCPU
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{RuntimeClassName: ptr.To(runtimeClass), RestartPolicy: corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false), EnableServiceLinks: ptr.To(false),
			Containers: []corev1.Container{{Name: "main", Image: defaultImage, Command: cmd,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Resources:       corev1.ResourceRequirements{Requests: req, Limits: lim}}}}}
}

var defaultImage string

func waitPodPhase(t *testing.T, k client.Client, key client.ObjectKey, want corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	poll.Eventually(t, 3*time.Minute, fmt.Sprintf("pod %s %s", key, want), func() error {
		if err := k.Get(context.Background(), key, &pod); err != nil {
			return err
		}
		if pod.Status.Phase != want {
			return fmt.Errorf("phase %s (%v)", pod.Status.Phase, pod.Status.ContainerStatuses)
		}
		return nil
	})
	return &pod
}

// TestJailedQEMUs: a template sandbox (restored) and a plain pod of the
// runtime class (cold-booted) each run QEMU as a uid of its own, with no
// capabilities, in a mount namespace of its own, in its pod's cgroup;
// from one's jail, as its uid, none of the other's files can be opened.
func TestJailedQEMUs(t *testing.T) {
	k := sbxtest.Client(t, c)
	isoTemplate(t, k)
	sbx := sbxtest.Create(t, k, "iso", "iso-jailed")["iso-jailed"]
	plain := plainPod("iso-plain", "default", sandlotv1.RuntimeClassName, 256, "sleep", "3600")
	if err := k.Create(context.Background(), plain); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), plain) })
	pod := waitPodPhase(t, k, client.ObjectKeyFromObject(plain), corev1.PodRunning)
	var sbxPod corev1.Pod
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: sbx.Status.PodName}, &sbxPod); err != nil {
		t.Fatal(err)
	}
	a, b := qemuOf(t, string(sbxPod.UID)), qemuOf(t, string(pod.UID))
	if a.uid == 0 || b.uid == 0 || a.uid == b.uid {
		t.Fatalf("QEMU uids %d and %d: want two distinct non-zero ones", a.uid, b.uid)
	}
	for _, q := range []struct {
		q      qemu
		podUID string
		other  qemu
	}{{a, string(sbxPod.UID), b}, {b, string(pod.UID), a}} {
		checkConfined(t, q.q, q.podUID, q.other)
		checkBundled(t, q.q)
	}
}

// checkBundled: the QEMU is the agent image's (node.qemu unset): its
// binary, manifest and every library it mapped come from the bundle the
// agent installed on its node, not the host's /usr, and its jail cannot
// write there.
func checkBundled(t *testing.T, q qemu) {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", q.pid))
	if err != nil {
		t.Fatal(err)
	}
	root, ok := vm.BundleRoot(exe)
	if !ok {
		t.Fatalf("QEMU %d runs %s, not the image's QEMU bundle", q.pid, exe)
	}
	image, err := cluster.QEMUBundle()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(image, vm.BundleManifest))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(root, vm.BundleManifest)); err != nil || string(got) != string(want) {
		t.Errorf("QEMU %d's bundle %s: manifest %q (%v), want the image's %q", q.pid, root, got, err, want)
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", q.pid))
	if err != nil {
		t.Fatal(err)
	}
	libs := 0
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[5], ".so") {
			continue
		}
		if libs++; !strings.HasPrefix(f[5], root+"/") {
			t.Errorf("QEMU %d mapped %s from outside its bundle %s", q.pid, f[5], root)
		}
	}
	if libs < 10 {
		t.Errorf("QEMU %d mapped %d libraries: its maps prove nothing", q.pid, libs)
	}
	r, err := asQEMU(q, "touch", filepath.Join(root, "bin", "planted"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.refused("touch", "Read-only file system", "Permission denied"); err != nil {
		t.Errorf("QEMU %d wrote into its bundle: %v", q.pid, err)
	}
}

func checkConfined(t *testing.T, q qemu, podUID string, other qemu) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", q.pid))
	if err != nil {
		t.Fatalf("QEMU %d: %v", q.pid, err)
	}
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("QEMU %d: no %q in its status", q.pid, want)
		}
	}
	host, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", q.pid)); err != nil || ns == host {
		t.Errorf("QEMU %d runs in the host's mount namespace (%s, %v)", q.pid, ns, err)
	}
	checkCgroup(t, q, podUID)
	// Its jail has no /proc: it cannot look at other processes either.
	if r, err := asQEMU(q, "cat", "/proc/self/status"); err != nil {
		t.Fatal(err)
	} else if err := r.refused("cat", "No such file"); err != nil {
		t.Errorf("QEMU %d's jail has a /proc: %v", q.pid, err)
	}
	if len(q.files) == 0 {
		t.Fatalf("QEMU %d: no files found on its command line", q.pid)
	}
	// Its own layer first: a jail in which head cannot run at all would
	// refuse every file below and prove nothing.
	if r, err := asQEMU(q, "head", "-c", "1", q.layer); err != nil || r.code != 0 {
		t.Fatalf("QEMU %d cannot read its own layer %s: %+v %v (the checks below would prove nothing)", q.pid, q.layer, r, err)
	}
	for _, f := range append(other.files, "/etc/shadow", "/etc/passwd", filepath.Dir(other.layer)) {
		r, err := asQEMU(q, "head", "-c", "1", f)
		if err != nil {
			t.Fatal(err)
		}
		// Refused, or absent from its jail: a directory it may open fails
		// with "Is a directory", which is no refusal.
		if err := r.refused("head", "Permission denied", "No such file or directory"); err != nil {
			t.Errorf("QEMU %d (uid %d) opened %s from its jail: %v", q.pid, q.uid, f, err)
		}
	}
}

// checkCgroup: the QEMU's memory cgroup is its pod's (cgroup v1's memory
// hierarchy; on a host with cgroup v2 only, its one hierarchy), where its
// memory is charged.
func checkCgroup(t *testing.T, q qemu, podUID string) {
	t.Helper()
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", q.pid))
	if err != nil {
		t.Fatalf("QEMU %d: %v", q.pid, err)
	}
	path, found := "", false
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		if _, p, ok := strings.Cut(line, ":memory:"); ok {
			path, found = p, true
			break
		}
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path, found = p, true // v2's, unless a v1 memory line follows
		}
	}
	if !found {
		t.Fatalf("QEMU %d: no memory cgroup in %q", q.pid, cg)
	}
	if !strings.Contains(path, "pod"+podUID) {
		t.Errorf("QEMU %d's memory cgroup is not its pod's: %s", q.pid, path)
	}
	// What the VM costs its pod: the RuntimeClass overhead is sized on it.
	peak, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", path, "memory.max_usage_in_bytes"))
	t.Logf("QEMU %d: its cgroup's peak memory %s bytes", q.pid, strings.TrimSpace(string(peak)))
}

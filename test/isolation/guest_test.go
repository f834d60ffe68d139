package isolation

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
	"github.com/sandlot-dev/sandlot/vm"
)

// TestGuestFillsDiskAndConsole: a guest writing until its disk is full
// gets ENOSPC from its own layer, and one flooding its serial console
// fills at most the capped log; the node's /run (the shim's root) and the
// other sandbox are unaffected.
func TestGuestFillsDiskAndConsole(t *testing.T) {
	k := sbxtest.Client(t, c)
	isoTemplate(t, k)
	sbxs := sbxtest.Create(t, k, "iso", "iso-filler", "iso-bystander")
	filler, bystander := sbxs["iso-filler"], sbxs["iso-bystander"]
	var pod corev1.Pod
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: filler.Status.PodName}, &pod); err != nil {
		t.Fatal(err)
	}
	q := qemuOf(t, string(pod.UID))
	var fs unix.Statfs_t
	if err := unix.Statfs(q.layer, &fs); err != nil || fs.Type == unix.TMPFS_MAGIC {
		t.Fatalf("the writable layer %s is on tmpfs (node RAM) or unreadable: %v", q.layer, err)
	}
	// dd writes until the disk is full, and must fail there.
	if r := sbxtest.EnvdExit(t, k, filler, "dd if=/dev/zero of=/root/fill bs=1M"); r.Code == 0 ||
		!strings.Contains(r.Stderr, "No space left on device") {
		t.Fatalf("dd until the disk is full: exit %d (%s), stderr %q: want it to fail with ENOSPC", r.Code, r.Status, r.Stderr)
	}
	var st unix.Stat_t
	if err := unix.Stat(q.layer, &st); err != nil {
		t.Fatal(err)
	}
	if size := int64(st.Size); st.Blocks*512 > size+(1<<20) {
		t.Fatalf("the layer uses %d bytes of the node's disk for a %d-byte device", st.Blocks*512, size)
	}
	console := filepath.Join(filepath.Dir(q.layer), "console.log")
	// 2.5 MB: more than twice the log's cap (so it rotates), written under
	// a guest-side bound shorter than envd's 30 s deadline (a loaded TCG
	// host writes the serial console slowly).
	// All of it written (0), or the guest-side bound hit first (timeout's
	// 124): anything else is a flood that did not happen.
	if r := sbxtest.EnvdExit(t, k, filler, "timeout 25 sh -c 'yes sandlot-console-flood-0123456789abcdef | head -c 2500000 > /dev/console'"); r.Code != 0 && r.Code != 124 {
		t.Fatalf("console flood: exit %d (%s), stderr %q", r.Code, r.Status, r.Stderr)
	}
	poll.Eventually(t, time.Minute, "the console log rotated", func() error {
		_, err := os.Stat(console + ".1")
		return err
	})
	for _, f := range []string{console, console + ".1"} {
		if fi, err := os.Stat(f); err != nil || fi.Size() > vm.ConsoleLogMax {
			t.Fatalf("%s: %v, %v (cap %d)", f, fi, err, vm.ConsoleLogMax)
		}
	}
	if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, bystander, "echo ok")); got != "ok" {
		t.Fatalf("the other sandbox after the flood: %q", got)
	}
	checkRunDirSmall(t, string(pod.UID))
}

// checkRunDirSmall: the pod's directory under the shims' root (the node's
// /run in production) holds only sockets and logs, whatever the guest did.
func checkRunDirSmall(t *testing.T, podUID string) {
	t.Helper()
	for _, n := range c.Nodes {
		dir := filepath.Join(n.SandlotRoot, "pods", podUID)
		var total int64
		_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				total += fi.Size()
			}
			return nil
		})
		if total > 1<<20 {
			t.Fatalf("%s holds %d bytes after the disk and console floods", dir, total)
		}
	}
}

// TestVMOverPodMemoryLimit: the VM is bound by its pod's memory limit. A
// runtime class with (almost) no overhead leaves no room for QEMU above
// the guest's RAM: a guest touching all of it takes QEMU over the pod's
// limit, the kernel kills QEMU, and the container is reported OOMKilled.
func TestVMOverPodMemoryLimit(t *testing.T) {
	k := sbxtest.Client(t, c)
	defaultImage = sbxtest.DefaultImage(t)
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandlot-no-overhead"}, Handler: "sandlot",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Mi")}}}
	if err := k.Create(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), rc) })
	// The guest grows in 4 MiB steps (one 180 MiB allocation is refused by
	// the guest's own overcommit check): QEMU's memory crosses the pod's
	// limit before the guest runs out of its own.
	hog := plainPod("iso-hog", "default", rc.Name, 192, "python3", "-c",
		"import time\nkept = []\nwhile True:\n    b = bytearray(4 << 20)\n    for i in range(0, len(b), 4096): b[i] = 1\n    kept.append(b)")
	if err := k.Create(context.Background(), hog); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), hog) })
	var pod corev1.Pod
	poll.Eventually(t, 4*time.Minute, "the memory hog's VM killed for its pod's limit", func() error {
		if err := k.Get(context.Background(), client.ObjectKeyFromObject(hog), &pod); err != nil {
			return err
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if term := cs.State.Terminated; term != nil {
				if term.Reason != "OOMKilled" {
					return poll.Stop(fmt.Errorf("container ended %s (exit %d): want OOMKilled", term.Reason, term.ExitCode))
				}
				return nil
			}
		}
		return fmt.Errorf("phase %s", pod.Status.Phase)
	})
}

// TestPoolVMRefusesBeforeClaim: a warm pool VM answers 401 to envd with
// no token and with a guessed one; once claimed, the sandbox answers only
// its own token.
func TestPoolVMRefusesBeforeClaim(t *testing.T) {
	k := sbxtest.Client(t, c)
	defaultImage = sbxtest.DefaultImage(t)
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "iso-pool", Namespace: "default"},
		Spec: sandlotv1.TemplateSpec{Image: defaultImage, Resources: sandlotv1.Resources{VCPU: 1, MemoryMiB: 256}, WarmPool: 1}}
	if err := k.Create(context.Background(), tpl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), tpl) })
	var pool corev1.PodList
	poll.Eventually(t, 6*time.Minute, "a Ready warm pool pod", func() error {
		if err := k.List(context.Background(), &pool, client.InNamespace("default"), client.MatchingLabels{sandlotv1.LabelPool: tpl.Name}); err != nil {
			return err
		}
		for _, p := range pool.Items {
			if p.Status.PodIP != "" && podReady(&p) {
				return nil
			}
		}
		return fmt.Errorf("%d pool pods, none Ready", len(pool.Items))
	})
	for _, p := range pool.Items {
		if p.Status.PodIP == "" || !podReady(&p) {
			continue
		}
		// A pool VM waits paused (it answers nothing at all); the window to
		// close is when it runs before the claim's identity is in: resumed
		// here the way the agent resumes it for a claim.
		resumePoolVM(t, &p)
		for _, token := range []string{"", "guess", strings.Repeat("0", 64)} {
			if code := envdStatus(t, p.Status.PodIP, token); code != 401 {
				t.Fatalf("pool pod %s answered %d to token %q before its claim: want 401", p.Name, code, token)
			}
		}
	}
	claimed := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "iso-claimed", Namespace: "default"},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Template: tpl.Name},
			Env: []sandlotv1.EnvVar{{Name: "TENANT_SECRET", Value: claimSecret}}}}
	if err := k.Create(context.Background(), claimed); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbxtest.Delete(t, k, claimed.Name) })
	// Running shows with the claim; the token is in once the agent
	// activated it.
	sbx := sbxtest.WaitVMReady(t, k, "iso-claimed")
	if got := strings.TrimSpace(sbxtest.EnvdRun(t, k, sbx, "echo mine $TENANT_SECRET")); got != "mine "+claimSecret {
		t.Fatalf("claimed sandbox with its token and env: %q", got)
	}
	pod := sbxtest.PodOf(t, k, sbx)
	checkEnvNotInPod(t, pod)
	checkNodeReadsNoToken(t, k, sbx, pod)
	if code := envdStatus(t, sbx.Status.PodIP, "not-its-token"); code != 401 {
		t.Fatalf("claimed sandbox answered %d to another token: want 401", code)
	}
}

// resumePoolVM continues a pool pod's paused VM through its shim's
// control socket, as the agent does before it pushes a claim.
func resumePoolVM(t *testing.T, p *corev1.Pod) {
	t.Helper()
	for _, n := range c.Nodes {
		if n.Name != p.Spec.NodeName {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctl, err := controlapi.Dial(ctx, node.Layout{Root: n.SandlotRoot}.ControlSocket(string(p.UID)))
		if err != nil {
			t.Fatal(err)
		}
		defer ctl.Close()
		if _, err := ctl.Resume(ctx, &controlapi.ResumeRequest{}); err != nil {
			t.Fatalf("resume pool pod %s: %v", p.Name, err)
		}
		return
	}
	t.Fatalf("pool pod %s is on no node of the cluster", p.Name)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// claimSecret is a claimed sandbox's env value: it reaches the VM sealed
// to the node's key in the claim, never in the clear (row 10).
const claimSecret = "s3cr3t-of-the-claimant"

// checkEnvNotInPod: nobody who may get pods reads a claimant's env.
func checkEnvNotInPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	for k, v := range pod.Annotations {
		if strings.Contains(v, claimSecret) {
			t.Errorf("pool pod %s's annotation %s holds the claimant's env: %s", pod.Name, k, v)
		}
	}
	if pod.Annotations[sandlotv1.AnnotationClaim] == "" {
		t.Errorf("pool pod %s carries no claim: the sandbox did not come from the pool", pod.Name)
	}
}

package shimtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// busybox is the image the VMs run: the app prints a line and waits.
var busybox = crienv.Image{Cmd: []string{"/bin/sh", "-c", "echo app-started; exec sleep 1000000"}}

// startBusybox starts the environment with the busybox image imported.
func startBusybox(t *testing.T) (*Env, string) {
	e := Start(t)
	const ref = "sandlot.test/busybox:1"
	e.ImportImage(t, ref, busybox)
	return e, ref
}

// TestPodIsAVM: a CRI pod under the sandlot handler is a VM that owns the
// pod IP, runs the image's command, execs, reports status and logs, and
// leaves nothing behind.
func TestPodIsAVM(t *testing.T) {
	e, img := startBusybox(t)
	start := time.Now()
	pod, cfg := e.RunPod(t, "vm1", Handler, nil)
	ctr := e.CreateStart(t, pod, cfg, "sandbox", img, map[string]string{"GREETING": "hi"})
	ip := e.PodIP(t, pod)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := crienv.WaitHTTP(ctx, HealthURL(ip)); err != nil {
		t.Fatalf("envd at the pod IP %s: %v", ip, err)
	}
	t.Logf("pod to first answer at %s: %v", ip, time.Since(start))
	out, errOut, code := e.ExecSync(t, ctr, "sh", "-c", "echo $GREETING; hostname; echo oops >&2; exit 3")
	if code != 3 || out != "hi\nvm1\n" || errOut != "oops\n" {
		t.Fatalf("exec: code %d stdout %q stderr %q", code, out, errOut)
	}
	if out := e.sh(t, ctr, "ip -4 -o addr show eth0"); !strings.Contains(out, ip+"/") {
		t.Fatalf("the guest's eth0 does not have the pod IP %s: %s", ip, out)
	}
	waitLog(t, crienv.ContainerLogPath(cfg, "sandbox"), "app-started")
	bg := context.Background()
	stats, err := e.Runtime.ContainerStats(bg, &runtimeapi.ContainerStatsRequest{ContainerId: ctr})
	if err != nil || stats.GetStats().GetMemory().GetWorkingSetBytes().GetValue() == 0 || stats.GetStats().GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 {
		t.Fatalf("ContainerStats: %v, %v", stats, err)
	}
	if _, err := e.Runtime.StopContainer(bg, &runtimeapi.StopContainerRequest{ContainerId: ctr, Timeout: 10}); err != nil {
		t.Fatal(err)
	}
	st, err := e.Runtime.ContainerStatus(bg, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Status.ExitCode != 143 {
		t.Fatalf("after StopContainer (SIGTERM to the app): %+v, %v", st.GetStatus(), err)
	}
	e.WaitVMsGone(t) // the app's exit stopped the VM
	e.RemovePod(t, pod)
	e.WaitNoLeftovers(t)
}

func waitLog(t *testing.T, path, want string) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, fmt.Sprintf("container log %s containing %q", path, want), func() error {
		if b, _ := os.ReadFile(path); !strings.Contains(string(b), want) {
			return fmt.Errorf("the log is %q", b)
		}
		return nil
	})
}

// running starts a sandlot pod with the busybox image and waits for envd
// at its IP; it returns the pod, its container, IP and config.
func (e *Env) running(t *testing.T, name, img string, ann map[string]string) (pod, ctr, ip string, cfg *runtimeapi.PodSandboxConfig) {
	t.Helper()
	pod, cfg = e.RunPod(t, name, Handler, ann)
	ctr = e.CreateStart(t, pod, cfg, "sandbox", img, nil)
	ip = e.PodIP(t, pod)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := crienv.WaitHTTP(ctx, HealthURL(ip)); err != nil {
		t.Fatalf("envd of %s at %s: %v", name, ip, err)
	}
	return pod, ctr, ip, cfg
}

// sh runs a shell command in the container and returns its stdout.
func (e *Env) sh(t *testing.T, ctr, cmd string) string {
	t.Helper()
	out, errOut, code := e.ExecSync(t, ctr, "sh", "-c", cmd)
	if code != 0 {
		t.Fatalf("%q exited %d: %s", cmd, code, errOut)
	}
	return out
}

// TestSnapshotRestoreControl: the control API snapshots a running pod; a
// new pod annotated with the snapshot comes up from it with its own IP and
// the file and in-memory value from before; pause stops the VM, resume
// continues it, and a restore in place rolls a pod back.
// Longer than 60 lines: one scenario, read in order.
func TestSnapshotRestoreControl(t *testing.T) {
	e, img := startBusybox(t)
	podA, ctrA, ipA, cfgA := e.running(t, "origin", img, nil)
	// /root is on the disk layer; /dev/shm is guest RAM.
	e.sh(t, ctrA, "echo on-disk > /root/file; echo in-memory > /dev/shm/value")
	ctl := e.Control(t, cfgA.Metadata.Uid)
	ctx := context.Background()
	snap := filepath.Join(e.Dir, "snap1")
	resp, err := ctl.Snapshot(ctx, &controlapi.SnapshotRequest{Dir: snap})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot: paused %v, took %v", time.Duration(resp.PausedNanos), time.Duration(resp.TookNanos))

	podB, ctrB, ipB, _ := e.running(t, "clone", img, RestoreAnnotations(snap))
	if ipB == ipA {
		t.Fatalf("the clone has the origin's IP %s", ipA)
	}
	if got := e.sh(t, ctrB, "cat /root/file /dev/shm/value; hostname; ip -4 -o addr show eth0"); !strings.Contains(got, "on-disk\nin-memory\nclone\n") || !strings.Contains(got, ipB+"/") {
		t.Fatalf("the clone has %q", got)
	}
	// Both answer at their own IPs at once.
	for _, ip := range []string{ipA, ipB} {
		if err := crienv.WaitHTTP(ctx, HealthURL(ip)); err != nil {
			t.Fatal(err)
		}
	}

	// Pause: no answer; resume: answers again.
	if _, err := ctl.Pause(ctx, &controlapi.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	if err := crienv.WaitHTTP(short, HealthURL(ipA)); err == nil {
		t.Fatal("a paused VM answered")
	}
	cancel()
	if _, err := ctl.Resume(ctx, &controlapi.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := crienv.WaitHTTP(ctx, HealthURL(ipA)); err != nil {
		t.Fatalf("after resume: %v", err)
	}

	// Restore in place: back to the snapshot, same pod and IP, app running.
	e.sh(t, ctrA, "echo changed > /root/file")
	if _, err := ctl.Restore(ctx, &controlapi.RestoreRequest{Dir: snap}); err != nil {
		t.Fatal(err)
	}
	if got := e.sh(t, ctrA, "cat /root/file; ip -4 -o addr show eth0"); !strings.HasPrefix(got, "on-disk\n") || !strings.Contains(got, ipA+"/") {
		t.Fatalf("after the restore in place: %q", got)
	}
	if st := e.ContainerState(t, ctrA); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container state after the restore in place: %v", st)
	}
	stats, err := ctl.Stats(ctx, &controlapi.StatsRequest{})
	if err != nil || stats.PssBytes <= 0 || stats.State != "Running" {
		t.Fatalf("stats: %+v, %v", stats, err)
	}
	e.RemovePod(t, podA)
	e.RemovePod(t, podB)
	e.WaitNoLeftovers(t)
}

// TestContainerdRestart: containerd restarted under three running pods
// loses none of them.
func TestContainerdRestart(t *testing.T) {
	e, img := startBusybox(t)
	var pods, ctrs, ips []string
	for _, name := range []string{"r1", "r2", "r3"} {
		pod, ctr, ip, _ := e.running(t, name, img, nil)
		pods, ctrs, ips = append(pods, pod), append(ctrs, ctr), append(ips, ip)
	}
	e.Restart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range pods {
		if err := crienv.WaitHTTP(ctx, HealthURL(ips[i])); err != nil {
			t.Fatalf("pod %d after the restart: %v", i, err)
		}
		if got := e.sh(t, ctrs[i], "echo alive"); got != "alive\n" {
			t.Fatalf("exec after the restart: %q", got)
		}
	}
	for _, p := range pods {
		e.RemovePod(t, p)
	}
	e.WaitNoLeftovers(t)
}

// TestKilledShim: a shim killed with SIGKILL takes its VM with it, the
// container shows the failure, and removing the pod leaves nothing; so
// does a QEMU killed under a live shim.
func TestKilledShim(t *testing.T) {
	e, img := startBusybox(t)
	pod, ctr, _, _ := e.running(t, "doomed", img, nil)
	shimPID := e.shimOf(t, pod)
	if err := syscall.Kill(shimPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.waitExited(t, ctr)
	st, err := e.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.ExitCode == 0 {
		t.Fatalf("a container whose shim was killed exited 0: %+v", st.Status)
	}
	t.Logf("container status after the shim died: exit %d reason %q message %q", st.Status.ExitCode, st.Status.Reason, st.Status.Message)
	if procs, err := pgrep("qemu-system.*pod-" + mustPodUID(t, e, pod)); err != nil || len(procs) > 0 {
		t.Fatalf("QEMU outlived its shim: %q %v", procs, err)
	}
	e.RemovePod(t, pod)
	e.WaitNoLeftovers(t)

	// QEMU dying under a live shim: the app container exits as killed and
	// the shim cleans up the VM's files.
	pod, ctr, _, cfg := e.running(t, "crashing", img, nil)
	qemu, err := pgrepOne("qemu-system.*pod-" + cfg.Metadata.Uid)
	if err != nil {
		t.Fatalf("the QEMU of pod %s: %v", cfg.Metadata.Uid, err)
	}
	if err := syscall.Kill(qemu, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.waitExited(t, ctr)
	if st, err := e.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: ctr}); err != nil || st.Status.ExitCode != 137 {
		t.Fatalf("container status after QEMU died: %+v, %v", st.GetStatus(), err)
	}
	e.WaitVMsGone(t)
	e.RemovePod(t, pod)
	e.WaitNoLeftovers(t)
}

// waitExited waits for a container to be reported exited.
func (e *Env) waitExited(t *testing.T, ctr string) {
	t.Helper()
	poll.Eventually(t, 15*time.Second, "container "+ctr+" exited", func() error {
		if st := e.ContainerState(t, ctr); st != runtimeapi.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("state %v", st)
		}
		return nil
	})
}

// shimOf finds the shim process serving a pod (its -id is the pod's
// sandbox ID: the pause container starts it).
func (e *Env) shimOf(t *testing.T, pod string) int {
	t.Helper()
	pid, err := pgrepOne("containerd-shim-sandlot-v2 .*-id " + pod)
	if err != nil {
		t.Fatalf("the shim of pod %s: %v", pod, err)
	}
	return pid
}

func mustPodUID(t *testing.T, e *Env, pod string) string {
	t.Helper()
	st, err := e.Runtime.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil {
		t.Fatal(err)
	}
	return st.Status.Metadata.Uid
}

package shimtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/test/crienv"
)

// busybox is the image the VMs run: the app prints a line and waits.
var busybox = crienv.Image{Cmd: []string{"/bin/sh", "-c", "echo app-started; exec sleep 1000000"}}

// TestPodIsAVM: a CRI pod under the sandlot handler is a VM that owns the
// pod IP, runs the image's command, execs, reports status and logs, and
// leaves nothing behind.
func TestPodIsAVM(t *testing.T) {
	e := Start(t)
	img := "sandlot.test/busybox:1"
	e.ImportImage(t, img, busybox)
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
	out, _, _ = e.ExecSync(t, ctr, "ip", "-4", "-o", "addr", "show", "eth0")
	if !strings.Contains(out, ip+"/") {
		t.Fatalf("the guest's eth0 does not have the pod IP %s: %s", ip, out)
	}
	waitLog(t, crienv.ContainerLogPath(cfg, "sandbox"), "app-started")
	e.RemovePod(t, pod)
	e.WaitNoLeftovers(t)
}

func waitLog(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container log %s: no %q in %q", path, want, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

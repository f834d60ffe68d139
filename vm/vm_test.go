package vm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	"github.com/sandlot-dev/sandlot/guest/identity"
)

// testAssets reads what `make vm-assets` built.
func testAssets(t testing.TB) (Assets, map[string]string) {
	t.Helper()
	cache := os.Getenv("SANDLOT_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "sandlot")
	}
	env := map[string]string{}
	f, err := os.Open(filepath.Join(cache, "vm", "current.env"))
	if err != nil {
		t.Fatalf("VM assets missing (%v): run `make vm-assets`", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return Assets{Kernel: env["SANDLOT_VM_KERNEL"], Initrd: env["SANDLOT_VM_INITRD"], Modules: env["SANDLOT_VM_MODULES"]}, env
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// userNet gives a VM guest IP ip in user-mode networking with envd
// forwarded to a free host port.
func userNet(t testing.TB, ip string, mac string) (NetSpec, identity.Network, int) {
	port := freePort(t)
	return NetSpec{MAC: mac, Forwards: []PortForward{{HostPort: port, GuestIP: ip, GuestPort: 49983}}},
		identity.Network{Interface: "eth0", Address: ip + "/24", Gateway: "10.0.2.2", MAC: mac}, port
}

// run runs a command in the guest through envd and returns its stdout.
func run(t testing.TB, port int, cmd string) string {
	t.Helper()
	c := processpbconnect.NewProcessClient(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d", port), connect.WithProtoJSON())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}}))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if end := ev.GetEnd(); end != nil && end.GetExitCode() != 0 {
			t.Fatalf("%q exited %d", cmd, end.GetExitCode())
		}
	}
	if err := stream.Err(); err != nil && err != io.EOF {
		t.Fatalf("%q: %v", cmd, err)
	}
	return out.String()
}

func waitHealth(t testing.TB, port int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("envd on :%d did not answer: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBootSnapshotRestore: cold boot the busybox disk, snapshot, restore
// two clones that each take their own identity and keep their writes.
func TestBootSnapshotRestore(t *testing.T) {
	a, env := testAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	nspec, nid, port := userNet(t, "10.0.2.15", "52:54:00:12:34:01")
	cfg := Config{Name: "boot-" + fmt.Sprint(os.Getpid()), RunDir: filepath.Join(dir, "run"), BaseDisk: env["SANDLOT_VM_BASE_BUSYBOX"],
		Net: nspec, Console: true, LayerMiB: 64}
	start := time.Now()
	v, err := Boot(ctx, a, cfg, identity.Identity{SandboxID: "parent", Hostname: "parent", Network: &nid})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	waitHealth(t, port)
	t.Logf("booted to envd in %v (accel %s)", time.Since(start), cfg.Accel)
	if got := run(t, port, "echo hi; hostname"); got != "hi\nparent\n" {
		t.Fatalf("command output %q", got)
	}
	snap := filepath.Join(dir, "snap")
	m, err := v.Snapshot(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot: paused %v, %d bytes", time.Duration(m.PausedNanos), m.TotalBytes(snap))
	for i := range 2 {
		ip := fmt.Sprintf("10.0.2.%d", 20+i)
		nspec, nid, port := userNet(t, ip, fmt.Sprintf("52:54:00:12:34:%02x", 0x10+i))
		ccfg := Config{Name: fmt.Sprintf("clone-%d-%d", os.Getpid(), i), RunDir: filepath.Join(dir, fmt.Sprint("c", i)), Net: nspec, Console: true}
		start := time.Now()
		c, err := Restore(ctx, "", ccfg, snap, identity.Identity{Hostname: fmt.Sprint("clone", i), Network: &nid})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		waitHealth(t, port)
		t.Logf("clone %d answered %v after launch", i, time.Since(start))
		if got := run(t, port, "hostname; ip -4 addr show eth0 2>/dev/null | grep -o 'inet [0-9.]*' || ifconfig eth0"); !strings.Contains(got, fmt.Sprint("clone", i)) || !strings.Contains(got, ip) {
			t.Fatalf("clone %d identity: %q", i, got)
		}
	}
}

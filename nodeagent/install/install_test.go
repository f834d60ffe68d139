package install

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	nodeapi "github.com/sandlot-dev/sandlot/api/node"
)

const (
	containerdConfig = "/etc/containerd/config.toml"
	dropInPath       = "/etc/containerd/conf.d/sandlot.toml"
	shimDest         = "/usr/local/bin/containerd-shim-sandlot-v2"
	shimConfigPath   = "/etc/sandlot/shim.json"
	kernelDest       = "/var/lib/sandlot/vm/vmlinux"
	initrdDest       = "/var/lib/sandlot/vm/initramfs.cpio.gz"
)

// node is a temp dir standing for a host's / plus an image's files, and
// a containerd whose restarts are counted.
type node struct {
	t          *testing.T
	host, img  string
	restarts   int
	restartErr error
}

func newNode(t *testing.T) *node {
	n := &node{t: t, host: t.TempDir(), img: t.TempDir()}
	for name, body := range map[string]string{"shim": "shim v1", "vmlinux": "kernel", "initrd": "initramfs"} {
		n.put(filepath.Join(n.img, name), body)
	}
	n.put(n.onHost(containerdConfig), "version = 3\nimports = ['/etc/containerd/conf.d/*.toml']\n")
	return n
}

func (n *node) put(path, body string) {
	n.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) onHost(p string) string { return filepath.Join(n.host, p) }

func (n *node) read(p string) (string, bool) {
	b, err := os.ReadFile(n.onHost(p))
	return string(b), err == nil
}

func (n *node) options() Options {
	return Options{HostRoot: n.host,
		Shim:           File{Src: filepath.Join(n.img, "shim"), Dest: shimDest},
		Kernel:         File{Src: filepath.Join(n.img, "vmlinux"), Dest: kernelDest},
		Initrd:         File{Src: filepath.Join(n.img, "initrd"), Dest: initrdDest},
		ShimConfigPath: shimConfigPath,
		ShimConfig: nodeapi.Config{Root: "/run/sandlot", ImageDir: "/var/lib/sandlot/images", Kernel: kernelDest,
			Initrd: initrdDest, AgentSocket: "/run/sandlot/agent.sock"},
		Containerd: &Containerd{ConfigPath: containerdConfig, DropInPath: dropInPath,
			Restart: func(context.Context) error { n.restarts++; return n.restartErr }},
	}
}

func TestInstallFresh(t *testing.T) {
	n := newNode(t)
	o := n.options()
	res, err := Install(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{shimDest, kernelDest, initrdDest, shimConfigPath, dropInPath}
	if !slices.Equal(res.Changed, want) || !res.Restarted || n.restarts != 1 {
		t.Fatalf("result %+v, %d restarts; want %v changed and one restart", res, n.restarts, want)
	}
	for p, body := range map[string]string{shimDest: "shim v1", kernelDest: "kernel", initrdDest: "initramfs"} {
		if got, _ := n.read(p); got != body {
			t.Errorf("%s = %q, want %q", p, got, body)
		}
	}
	if st, err := os.Stat(n.onHost(shimDest)); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("shim binary: %v, %v; want mode 0755", st, err)
	}
	wantCfg, _ := RenderShimConfig(o.ShimConfig)
	if got, _ := n.read(shimConfigPath); got != string(wantCfg) {
		t.Errorf("shim config:\n%s\nwant:\n%s", got, wantCfg)
	}
	wantDropIn, _ := RenderDropIn(DropIn{ConfigPath: shimConfigPath})
	if got, _ := n.read(dropInPath); got != string(wantDropIn) {
		t.Errorf("drop-in:\n%s\nwant:\n%s", got, wantDropIn)
	}
}

func TestInstallAgainChangesNothing(t *testing.T) {
	n := newNode(t)
	install(t, n.options())
	res := install(t, n.options())
	if len(res.Changed) != 0 || res.Restarted || n.restarts != 1 {
		t.Fatalf("second install: %+v, %d restarts; want no change, one restart in all", res, n.restarts)
	}
	// A new shim binary needs no containerd restart: new pods exec it.
	n.put(filepath.Join(n.img, "shim"), "shim v2")
	res = install(t, n.options())
	if !slices.Equal(res.Changed, []string{shimDest}) || n.restarts != 1 {
		t.Fatalf("new shim: %+v, %d restarts; want the shim changed only", res, n.restarts)
	}
}

func TestInstallNewDropInRestarts(t *testing.T) {
	n := newNode(t)
	install(t, n.options())
	o := n.options()
	o.Containerd.RuntimePath = true
	res := install(t, o)
	if !slices.Equal(res.Changed, []string{dropInPath}) || n.restarts != 2 {
		t.Fatalf("%+v, %d restarts; want the drop-in changed and a second restart", res, n.restarts)
	}
	if got, _ := n.read(dropInPath); !strings.Contains(got, "runtime_path = '"+shimDest+"'") {
		t.Fatalf("drop-in lacks runtime_path:\n%s", got)
	}
}

func TestInstallFailedRestartIsRetried(t *testing.T) {
	n := newNode(t)
	n.restartErr = errors.New("unit containerd.service not found")
	if _, err := Install(context.Background(), n.options()); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("err = %v, want the restart's", err)
	}
	if _, ok := n.read(dropInPath); ok {
		t.Fatal("a drop-in containerd never loaded was left behind: the next install would not restart")
	}
	n.restartErr = nil
	if res := install(t, n.options()); !res.Restarted {
		t.Fatalf("retry: %+v, want a restart", res)
	}
	// A failed restart after a change puts the previous drop-in back.
	before, _ := n.read(dropInPath)
	o := n.options()
	o.Containerd.RuntimePath = true
	n.restartErr = errors.New("timeout")
	if _, err := Install(context.Background(), o); err == nil {
		t.Fatal("want the restart's error")
	}
	if got, _ := n.read(dropInPath); got != before {
		t.Fatalf("drop-in after a failed restart:\n%s\nwant the previous:\n%s", got, before)
	}
}

func TestInstallRefusesAConfigThatDoesNotImport(t *testing.T) {
	for name, config := range map[string]string{
		"no imports":    "version = 2\n[plugins]\n",
		"other imports": "version = 3\nimports = ['/etc/containerd/other.toml']\n",
		"no config":     "",
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			if config == "" {
				os.Remove(n.onHost(containerdConfig))
			} else {
				n.put(n.onHost(containerdConfig), config)
			}
			_, err := Install(context.Background(), n.options())
			if err == nil || !strings.Contains(err.Error(), containerdConfig) {
				t.Fatalf("err = %v, want one naming %s", err, containerdConfig)
			}
			if _, ok := n.read(dropInPath); ok || n.restarts != 0 {
				t.Fatalf("drop-in written or containerd restarted (%d) for a config that ignores it", n.restarts)
			}
		})
	}
}

func TestInstallWithoutRegistering(t *testing.T) {
	n := newNode(t)
	o := n.options()
	o.Containerd = nil
	res := install(t, o)
	if _, ok := n.read(dropInPath); ok || res.Restarted || n.restarts != 0 {
		t.Fatalf("%+v: want no drop-in and no restart", res)
	}
	if _, ok := n.read(shimConfigPath); !ok {
		t.Fatal("no shim config")
	}
}

func TestInstallMissingSource(t *testing.T) {
	n := newNode(t)
	os.Remove(filepath.Join(n.img, "vmlinux"))
	if _, err := Install(context.Background(), n.options()); err == nil || !strings.Contains(err.Error(), kernelDest) {
		t.Fatalf("err = %v, want one naming %s", err, kernelDest)
	}
}

func TestUninstall(t *testing.T) {
	n := newNode(t)
	install(t, n.options())
	n.put(n.onHost("/var/lib/sandlot/store/snap/memory"), "data")
	res, err := Uninstall(context.Background(), n.options())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Restarted || n.restarts != 2 || len(res.Changed) != 5 {
		t.Fatalf("%+v, %d restarts; want five paths removed and a restart", res, n.restarts)
	}
	for _, p := range []string{dropInPath, shimConfigPath, shimDest, kernelDest, initrdDest} {
		if _, ok := n.read(p); ok {
			t.Errorf("%s left behind", p)
		}
	}
	if _, ok := n.read("/var/lib/sandlot/store/snap/memory"); !ok {
		t.Error("uninstall removed store data")
	}
	if _, ok := n.read(containerdConfig); !ok {
		t.Error("uninstall removed containerd's own config")
	}
	res, err = Uninstall(context.Background(), n.options())
	if err != nil || len(res.Changed) != 0 || n.restarts != 2 {
		t.Fatalf("second uninstall: %+v, %v, %d restarts; want nothing", res, err, n.restarts)
	}
}

func install(t *testing.T, o Options) Result {
	t.Helper()
	res, err := Install(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

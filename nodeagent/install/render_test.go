package install

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	nodeapi "github.com/sandlot-dev/sandlot/api/node"
)

func TestRenderDropIn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      DropIn
		want    []string // lines (trimmed) the drop-in must hold
		notWant []string
		err     string
	}{
		{name: "default", in: DropIn{ConfigPath: "/etc/sandlot/shim.json"},
			want: []string{"version = 3",
				"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.sandlot]",
				"runtime_type = 'io.containerd.sandlot.v2'", "sandboxer = 'podsandbox'",
				"pod_annotations = ['sandlot.dev/*']",
				"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.sandlot.options]",
				"ConfigPath = '/etc/sandlot/shim.json'"},
			notWant: []string{"runtime_path"}},
		{name: "runtime path", in: DropIn{ConfigPath: "/etc/sandlot/shim.json", RuntimePath: "/opt/sandlot/bin/containerd-shim-sandlot-v2"},
			want: []string{"runtime_path = '/opt/sandlot/bin/containerd-shim-sandlot-v2'"}},
		{name: "no config path", in: DropIn{}, err: "ConfigPath"},
		{name: "relative config path", in: DropIn{ConfigPath: "shim.json"}, err: "absolute"},
		{name: "quote", in: DropIn{ConfigPath: "/etc/it's.json"}, err: "quotes"},
		{name: "newline", in: DropIn{ConfigPath: "/etc/a\n[x]"}, err: "control"},
		{name: "relative runtime path", in: DropIn{ConfigPath: "/a.json", RuntimePath: "bin/shim"}, err: "runtime_path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := RenderDropIn(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			lines := trimmedLines(string(b))
			for _, w := range tc.want {
				if !lines[w] {
					t.Errorf("drop-in lacks %q:\n%s", w, b)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(string(b), w) {
					t.Errorf("drop-in has %q:\n%s", w, b)
				}
			}
		})
	}
}

func trimmedLines(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		m[strings.TrimSpace(l)] = true
	}
	return m
}

func TestRenderShimConfig(t *testing.T) {
	good := nodeapi.Config{Root: "/run/sandlot", ImageDir: "/var/lib/sandlot/images", MemoryDir: "/dev/shm",
		Kernel: "/var/lib/sandlot/vm/vmlinux", Initrd: "/var/lib/sandlot/vm/initramfs.cpio.gz",
		Modules: "/modules/virtio.ko", AgentSocket: "/run/sandlot/agent.sock"}
	for _, tc := range []struct {
		name string
		edit func(*nodeapi.Config)
		err  string
	}{
		{name: "good", edit: func(*nodeapi.Config) {}},
		{name: "defaults left to the shim", edit: func(c *nodeapi.Config) { c.Root, c.ImageDir, c.MemoryDir, c.AgentSocket = "", "", "", "" }},
		{name: "kvm", edit: func(c *nodeapi.Config) { c.Accel = "kvm" }},
		{name: "no kernel", edit: func(c *nodeapi.Config) { c.Kernel = "" }, err: "kernel"},
		{name: "no initrd", edit: func(c *nodeapi.Config) { c.Initrd = "" }, err: "initrd"},
		{name: "relative root", edit: func(c *nodeapi.Config) { c.Root = "run/sandlot" }, err: "root"},
		{name: "relative socket", edit: func(c *nodeapi.Config) { c.AgentSocket = "agent.sock" }, err: "agentSocket"},
		{name: "bad accel", edit: func(c *nodeapi.Config) { c.Accel = "hvf" }, err: "accel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			b, err := RenderShimConfig(c)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The shim reads exactly this type back.
			var back nodeapi.Config
			if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, c) {
				t.Fatalf("round trip: %+v, %v; want %+v", back, err, c)
			}
		})
	}
}

func TestImports(t *testing.T) {
	const dropIn = "/etc/containerd/conf.d/sandlot.toml"
	for _, tc := range []struct {
		name, config string
		want         bool
		err          string
	}{
		{name: "containerd 2 default", config: "version = 3\nimports = ['/etc/containerd/conf.d/*.toml']\n[grpc]\n", want: true},
		{name: "basic string", config: `imports = ["/etc/containerd/conf.d/*.toml"]`, want: true},
		{name: "exact path", config: `imports = ["/etc/containerd/conf.d/sandlot.toml"]`, want: true},
		{name: "relative to the config", config: `imports = ['conf.d/*.toml']`, want: true},
		{name: "multi-line with comments", config: "imports = [\n  '/opt/x.toml', # other\n  # ours:\n  \"/etc/containerd/conf.d/*.toml\",\n]\n", want: true},
		{name: "other dir", config: `imports = ['/etc/containerd/other/*.toml']`},
		{name: "empty", config: "version = 3\nimports = []\n"},
		{name: "none", config: "version = 2\n[plugins]\n"},
		{name: "only inside a table", config: "[plugins.x]\nimports = ['/etc/containerd/conf.d/*.toml']\n"},
		{name: "not an array", config: "imports = '/etc/containerd/conf.d/*.toml'", err: "want an array"},
		{name: "unterminated", config: "imports = ['/etc/containerd/conf.d/*.toml'", err: "unterminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Imports([]byte(tc.config), "/etc/containerd/config.toml", dropIn)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Imports = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"NODE_NAME": "n1", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for in, want := range map[string]string{
		"/var/lib/sandlot":                 "/var/lib/sandlot",
		"/var/tmp/up/$(NODE_NAME)/sandlot": "/var/tmp/up/n1/sandlot",
		"$(NODE_NAME)-$(NODE_NAME)":        "n1-n1",
		"/a/$(UNSET)/b":                    "/a/$(UNSET)/b",
		"/a/$$(NODE_NAME)":                 "/a/$(NODE_NAME)",
		"/a/$(EMPTY)b":                     "/a/b",
		"cost $5":                          "cost $5",
		"trailing $":                       "trailing $",
		"$(unclosed":                       "$(unclosed",
	} {
		if got := ExpandEnv(in, lookup); got != want {
			t.Errorf("ExpandEnv(%q) = %q, want %q", in, got, want)
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

func TestPlanBoot(t *testing.T) {
	env := map[string]string{
		envBase: "/dev/vda", envLayer: "/dev/vdb", envUser: "user",
		envModules: "/modules/virtio.ko::/modules/virtio_mmio.ko:",
	}
	p := planBoot(func(k string) string { return env[k] })
	if p.Init.BaseDevice != "/dev/vda" || p.Init.WritableDevice != "/dev/vdb" {
		t.Errorf("devices = %q %q", p.Init.BaseDevice, p.Init.WritableDevice)
	}
	if !slices.Equal(p.Init.Modules, []string{"/modules/virtio.ko", "/modules/virtio_mmio.ko"}) {
		t.Errorf("modules = %v", p.Init.Modules)
	}
	want := []string{"--root", "/", "--control", defaultControlPort, "--default-user", "user", "--apply-host"}
	if !slices.Equal(p.Serve, want) {
		t.Errorf("serve = %v, want %v", p.Serve, want)
	}
	if d := planBoot(func(string) string { return "" }); d.Init.BaseDevice != "" || d.Serve[5] != autoUser {
		t.Errorf("defaults = %+v", d)
	}
}

func TestResolveControl(t *testing.T) {
	sys := t.TempDir()
	for port, name := range map[string]string{"vport0p0": "other", "vport0p1": "sandlot.control"} {
		dir := filepath.Join(sys, "class", "virtio-ports", port)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "name"), []byte(name+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := resolveControl(sys, "virtio-port:sandlot.control"); err != nil || got != "/dev/vport0p1" {
		t.Fatalf("resolve = %q, %v", got, err)
	}
	if got, _ := resolveControl(sys, "/run/ctl.sock"); got != "/run/ctl.sock" {
		t.Fatalf("a path changed: %q", got)
	}
	if _, err := resolveControl(sys, "virtio-port:missing"); err == nil {
		t.Fatal("missing port resolved")
	}
}

// TestDefaultUserOf: E2B's "user" where the image has it, root where not.
func TestDefaultUserOf(t *testing.T) {
	for passwd, want := range map[string]string{
		"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n": "user",
		"root:x:0:0:root:/root:/bin/sh\n":                                         "root",
	} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte(passwd), 0o644); err != nil {
			t.Fatal(err)
		}
		root, err := sandboxfs.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := defaultUserOf(root); got != want {
			t.Errorf("passwd %q: default user %q, want %q", passwd, got, want)
		}
	}
}

package main

import (
	"slices"
	"testing"
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
	if d := planBoot(func(string) string { return "" }); d.Init.BaseDevice != "" || d.Serve[5] != "root" {
		t.Errorf("defaults = %+v", d)
	}
}

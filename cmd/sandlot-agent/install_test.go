package main

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestInstallFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "n2")
	parse := func(args ...string) (*installFlags, []string) {
		fs := flag.NewFlagSet("install", flag.ContinueOnError)
		f := &installFlags{}
		f.bind(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f, fs.Args()
	}
	f, rest := parse("--sandlot-root=/var/tmp/up/$(NODE_NAME)/sandlot", "--kernel=/var/tmp/up/$(NODE_NAME)/vm/vmlinux",
		"--containerd-dropin=/etc/containerd/conf.d/sandlot.toml", "--", "systemctl", "restart", "containerd")
	o, err := f.options(rest)
	if err != nil {
		t.Fatal(err)
	}
	if o.ShimConfig.Root != "/var/tmp/up/n2/sandlot" || o.ShimConfig.AgentSocket != "/var/tmp/up/n2/sandlot/agent.sock" {
		t.Errorf("root %q, agent socket %q: want $(NODE_NAME) expanded", o.ShimConfig.Root, o.ShimConfig.AgentSocket)
	}
	if o.ShimConfig.Kernel != "/var/tmp/up/n2/vm/vmlinux" || o.ShimConfig.Initrd != o.Initrd.Dest {
		t.Errorf("shim config kernel %q initrd %q: want the installed files", o.ShimConfig.Kernel, o.ShimConfig.Initrd)
	}
	if o.Containerd == nil || o.Containerd.DropInPath != "/etc/containerd/conf.d/sandlot.toml" {
		t.Fatalf("containerd %+v: want the runtime registered", o.Containerd)
	}

	f, rest = parse("--containerd-dropin=/etc/containerd/conf.d/sandlot.toml")
	if _, err := f.options(rest); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Errorf("err = %v: want the missing restart command named", err)
	}
	f, rest = parse()
	if o, err := f.options(rest); err != nil || o.Containerd != nil || o.ShimConfig.ShimMemoryMaxMiB != nil {
		t.Errorf("no flags: drop-in %+v, shim memory cap %v, %v; want the runtime left unregistered, the shim's default cap",
			o.Containerd, o.ShimConfig.ShimMemoryMaxMiB, err)
	}
	for _, n := range []int{0, 256} {
		f, rest = parse("--shim-memory-max-mib=" + strconv.Itoa(n))
		if o, err := f.options(rest); err != nil || o.ShimConfig.ShimMemoryMaxMiB == nil || *o.ShimConfig.ShimMemoryMaxMiB != n {
			t.Errorf("--shim-memory-max-mib=%d: %v, %v", n, o.ShimConfig.ShimMemoryMaxMiB, err)
		}
	}
}

func TestResolveGlob(t *testing.T) {
	dir := t.TempDir()
	pv := filepath.Join(dir, "volumes", "kubernetes.io~csi", "pvc-1234", "mount")
	if err := os.MkdirAll(pv, 0o755); err != nil {
		t.Fatal(err)
	}
	pattern := filepath.Join(dir, "volumes", "kubernetes.io~csi", "*", "mount")
	if got, err := resolveGlob(pattern); err != nil || got != pv {
		t.Fatalf("resolveGlob = %q, %v; want %q", got, err, pv)
	}
	if got, err := resolveGlob("/plain/dir"); err != nil || got != "/plain/dir" {
		t.Fatalf("plain path: %q, %v", got, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "volumes", "kubernetes.io~csi", "pvc-5678", "mount"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveGlob(pattern); err == nil {
		t.Fatal("two matches: want an error")
	}
	if _, err := resolveGlob(filepath.Join(dir, "none", "*")); err == nil {
		t.Fatal("no match: want an error")
	}
}

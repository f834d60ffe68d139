package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandlot-dev/sandlot/api/node"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/nodeagent/install"
	"github.com/sandlot-dev/sandlot/vm"
)

// installFlags are the install and uninstall subcommands' flags: every
// path is a host path ($(VAR) references expanded from the environment,
// as the chart's preStop hook gets none from the kubelet), the sources
// are in the agent's image.
type installFlags struct {
	o                 install.Options
	dropIn, ctrConfig string
	runtimePath       bool
}

func (f *installFlags) bind(fs *flag.FlagSet) {
	o, c := &f.o, &f.o.ShimConfig
	fs.StringVar(&o.HostRoot, "host-root", "/host", "where the host's / is mounted")
	fs.StringVar(&o.Shim.Src, "shim-src", "/opt/sandlot/bin/containerd-shim-sandlot-v2", "the shim binary in this image")
	fs.StringVar(&o.Shim.Dest, "shim", "/usr/local/bin/containerd-shim-sandlot-v2", "the shim binary on the host (on containerd's PATH, or see --runtime-path)")
	fs.StringVar(&o.Kernel.Src, "kernel-src", "/opt/sandlot/vm/vmlinux", "the guest kernel in this image")
	fs.StringVar(&o.Kernel.Dest, "kernel", "/var/lib/sandlot/vm/vmlinux", "the guest kernel on the host")
	fs.StringVar(&o.Initrd.Src, "initrd-src", "/opt/sandlot/vm/initramfs.cpio.gz", "the guest initramfs in this image")
	fs.StringVar(&o.Initrd.Dest, "initrd", "/var/lib/sandlot/vm/initramfs.cpio.gz", "the guest initramfs on the host")
	fs.StringVar(&o.ShimConfigPath, "shim-config", "/etc/sandlot/shim.json", "the shim's JSON config on the host (the runtime's ConfigPath)")
	fs.StringVar(&c.Root, "sandlot-root", node.DefaultRoot, "shim config: the shims' <root> (control sockets)")
	fs.StringVar(&c.ImageDir, "image-dir", "/var/lib/sandlot/images", "shim config: base disk cache")
	fs.StringVar(&c.MemoryDir, "memory-dir", "/dev/shm", "shim config: tmpfs directory for guest RAM")
	fs.StringVar(&c.DiskDir, "disk-dir", "/var/lib/sandlot/vms", "shim config: VMs' writable layers and console logs (on a disk)")
	fs.IntVar(&c.VMUIDs.First, "vm-uid-first", node.DefaultVMUIDFirst, "shim config: first uid of the jailed QEMUs")
	fs.IntVar(&c.VMUIDs.Count, "vm-uid-count", node.DefaultVMUIDCount, "shim config: how many uids the jailed QEMUs may use")
	fs.IntVar(&c.VMMGroup, "vmm-group", node.DefaultVMMGroup, "shim config: the group every jailed QEMU is in (reads base disks and memory)")
	fs.StringVar(&c.AgentSocket, "agent-socket", "", "shim config: the agent's stage socket (default <sandlot-root>/agent.sock)")
	fs.StringVar(&c.QEMU, "qemu", "", "shim config: the host's QEMU binary (default: qemu-system-x86_64 on PATH; not with --qemu-src)")
	fs.StringVar(&o.QEMU.Src, "qemu-src", "", "the QEMU bundle in this image, installed at --qemu-dir and run by the shims (empty: the host's QEMU)")
	fs.StringVar(&o.QEMU.Dest, "qemu-dir", "", "where the QEMU bundle goes on the host (uninstall removes it)")
	fs.StringVar(&c.Modules, "modules", "", "shim config: the guest's SANDLOT_MODULES (.ko paths in the initramfs, colon-separated)")
	fs.StringVar(&c.Accel, "accel", "", "shim config: kvm or tcg (default: detect)")
	fs.StringVar(&c.VolumeDir, "volume-dir", "", "shim config: the shared volume storage's mount on the host (E2B volumes; empty: none)")
	fs.IntVar(&o.VolumeOwner, "volume-owner", 1000, "uid and gid owning --volume-dir when install makes it")
	fs.IntVar(&c.DefaultMemoryMiB, "default-memory-mib", 0, "shim config: memory of a VM whose pod does not say (0: the shim's default)")
	fs.IntVar(&c.DefaultVCPU, "default-vcpu", 0, "shim config: vCPUs of a VM whose pod does not say (0: the shim's default)")
	fs.IntVar(&c.LayerMiB, "layer-mib", 0, "shim config: a cold-booted VM's writable layer (0: the shim's default)")
	fs.Func("deny-out", "shim config: comma-separated CIDRs no sandbox may connect to, whatever its rules (default: link-local, private, shared, loopback, multicast, reserved)", func(v string) error {
		c.Network.DenyOut = node.SplitList(v)
		return nil
	})
	fs.Func("open-out", "shim config: comma-separated ranges inside --deny-out a sandbox's allowOut may open", func(v string) error {
		c.Network.OpenOut = node.SplitList(v)
		return nil
	})
	fs.Func("ingress-from", "shim config: comma-separated CIDRs that may open connections to every sandbox, besides the node and sandlot-api", func(v string) error {
		c.Network.IngressFrom = node.SplitList(v)
		return nil
	})
	fs.Func("resolve-when-closed", "shim config: comma-separated domains (name or *.suffix) a sandbox's resolver answers while its egress is closed", func(v string) error {
		c.Network.ResolveWhenClosed = node.SplitList(v)
		return nil
	})
	fs.StringVar(&c.Network.UpstreamCAFile, "upstream-ca-file", "", "shim config: PEM file on the node of CAs the egress proxy trusts, besides the system's, for the upstreams of header rules")
	fs.BoolVar(&c.Network.IngressOpen, "ingress-open", false, "shim config: anyone may open connections to every sandbox")
	fs.Func("shim-memory-max-mib", fmt.Sprintf("shim config: cap on each pod's shim process, MiB (0: uncapped; default %d)", node.DefaultShimMemoryMaxMiB), func(v string) error {
		n, err := strconv.Atoi(v)
		c.ShimMemoryMaxMiB = &n
		return err
	})
	fs.StringVar(&f.ctrConfig, "containerd-config", "/etc/containerd/config.toml", "containerd's main config on the host (must import --containerd-dropin)")
	fs.StringVar(&f.dropIn, "containerd-dropin", "", "containerd drop-in registering the runtime (empty: do not register it)")
	fs.BoolVar(&f.runtimePath, "runtime-path", false, "name the shim binary in the drop-in (runtime_path) instead of relying on containerd's PATH")
}

// options completes the install options: restart is the command after
// "--" that restarts containerd (run only when the drop-in changed).
func (f *installFlags) options(restart []string) (install.Options, error) {
	o := f.o
	for _, p := range []*string{&o.Shim.Dest, &o.Kernel.Dest, &o.Initrd.Dest, &o.ShimConfigPath, &o.ShimConfig.Root,
		&o.ShimConfig.ImageDir, &o.ShimConfig.MemoryDir, &o.ShimConfig.DiskDir, &o.ShimConfig.AgentSocket, &f.ctrConfig, &f.dropIn} {
		*p = install.ExpandEnv(*p, os.LookupEnv)
	}
	o.QEMU.Dest = install.ExpandEnv(o.QEMU.Dest, os.LookupEnv)
	if err := bundledQEMU(&o); err != nil {
		return o, err
	}
	o.ShimConfig.Kernel, o.ShimConfig.Initrd = o.Kernel.Dest, o.Initrd.Dest
	if o.ShimConfig.AgentSocket == "" {
		o.ShimConfig.AgentSocket = o.ShimConfig.Layout().StageSocket()
	}
	if f.dropIn == "" {
		return o, nil
	}
	if len(restart) == 0 {
		return o, errors.New("--containerd-dropin needs the command that restarts containerd after --")
	}
	o.Containerd = &install.Containerd{ConfigPath: f.ctrConfig, DropInPath: f.dropIn, RuntimePath: f.runtimePath,
		Restart: func(ctx context.Context) error { return runRestart(ctx, o.HostRoot, restart) }}
	return o, nil
}

// bundledQEMU points the shim config at the bundle --qemu-src installs.
func bundledQEMU(o *install.Options) error {
	switch {
	case o.QEMU.Src == "":
		return nil
	case o.ShimConfig.QEMU != "":
		return errors.New("--qemu names the host's QEMU, --qemu-src installs this image's: give one")
	case !filepath.IsAbs(o.QEMU.Dest):
		return fmt.Errorf("--qemu-src needs --qemu-dir, an absolute host path (got %q)", o.QEMU.Dest)
	}
	o.ShimConfig.QEMU = filepath.Join(o.QEMU.Dest, vm.BundleBinary)
	return nil
}

// restartTimeout bounds a containerd restart.
const restartTimeout = 2 * time.Minute

// runRestart runs argv chrooted in the host's root, with the host's
// binaries (systemctl reaches the host's systemd through its /run; the
// pod has the host's PID namespace): the agent image needs none of them.
func runRestart(ctx context.Context, hostRoot string, argv []string) error {
	ctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	fmt.Printf("restarting containerd: %s (in %s)\n", strings.Join(argv, " "), hostRoot)
	cmd, err := vm.RootCommand(hostRoot, argv[0], argv[1:]...)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() }) // the bound
	defer stop()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

// installCmd is `sandlot-agent install`: the chart's init container.
func installCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sandlot-agent install", flag.ContinueOnError)
	var f installFlags
	f.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	o, err := f.options(fs.Args())
	if err != nil {
		return err
	}
	res, err := install.Install(ctx, o)
	report("installed", res)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}

// uninstallCmd is `sandlot-agent uninstall`: the chart's preStop hook,
// which acts only when the agent's DaemonSet is going away.
func uninstallCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sandlot-agent uninstall", flag.ContinueOnError)
	var f installFlags
	f.bind(fs)
	unless := fs.String("unless-daemonset", "", "<namespace>/<name>: do nothing while this DaemonSet exists (a rolling update, a restart)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o, err := f.options(fs.Args())
	if err != nil {
		return err
	}
	if *unless != "" {
		leaving, err := daemonSetLeaving(ctx, *unless)
		if err != nil {
			return fmt.Errorf("uninstall: %w (the node is left as it is)", err)
		}
		if !leaving {
			fmt.Printf("uninstall: DaemonSet %s stays: the node keeps the runtime\n", *unless)
			return nil
		}
	}
	res, err := install.Uninstall(ctx, o)
	report("removed", res)
	if err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	return nil
}

func daemonSetLeaving(ctx context.Context, ref string) (bool, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return false, fmt.Errorf("--unless-daemonset %q: want <namespace>/<name>", ref)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return false, fmt.Errorf("load kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := appsv1.AddToScheme(scheme); err != nil {
		return false, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return false, fmt.Errorf("kubernetes client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return install.Leaving(ctx, c, client.ObjectKey{Namespace: ns, Name: name})
}

func report(verb string, res install.Result) {
	for _, p := range res.Changed {
		fmt.Println(verb, p)
	}
	if len(res.Changed) == 0 {
		fmt.Println("nothing to change")
	}
	if res.Restarted {
		fmt.Println("containerd restarted")
	}
}

// resolveGlob turns a pattern into the one path it matches: the chart
// names the agent pod's JuiceFS PVC by the kubelet's directory for it,
// whose PV name is known only once provisioned.
func resolveGlob(pattern string) (string, error) {
	if !strings.ContainsAny(pattern, "*?[") {
		return pattern, nil
	}
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return "", fmt.Errorf("%q: %w", pattern, err)
	}
	if len(matches) != 1 {
		return "", fmt.Errorf("%q matches %d paths %v, want one", pattern, len(matches), matches)
	}
	return matches[0], nil
}

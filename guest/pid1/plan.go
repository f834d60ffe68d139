package pid1

import (
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// StepKind is what a boot step does.
type StepKind string

// Boot step kinds.
const (
	StepMkdir      StepKind = "mkdir"       // MkdirAll(Target, Mode)
	StepMount      StepKind = "mount"       // mount(Source, Target, FSType, Flags, Data)
	StepMove       StepKind = "move"        // mount(Source, Target, MS_MOVE)
	StepConsole    StepKind = "console"     // stdio on Target (/dev/console) if it has none
	StepLoadModule StepKind = "load-module" // finit_module(Source); EEXIST is fine
	StepWaitDevice StepKind = "wait-device" // wait until Target exists
	StepSwitchRoot StepKind = "switch-root" // chdir Target, MS_MOVE it onto /, chroot .
)

// Step is one boot action. The executor is a thin layer over syscalls;
// all decisions are made by Plan.
type Step struct {
	Kind   StepKind
	Source string
	Target string
	FSType string
	Flags  uintptr
	Data   string
	Mode   os.FileMode
	// IfNotMounted skips a mount whose target is already a mount point
	// (the kernel may have mounted devtmpfs itself).
	IfNotMounted bool
	// Hint is appended to the error when the step fails.
	Hint string
}

// String renders a step for logs and tests, e.g.
// "mount proc /proc proc nosuid,nodev,noexec".
func (s Step) String() string {
	f := []string{string(s.Kind)}
	add := func(v string) {
		if v != "" {
			f = append(f, v)
		}
	}
	switch s.Kind {
	case StepMkdir:
		add(s.Target)
		add(modeString(s.Mode))
	case StepMount:
		add(s.Source)
		add(s.Target)
		add(s.FSType)
		add(flagString(s.Flags))
		add(s.Data)
		if s.IfNotMounted {
			add("(if not mounted)")
		}
	case StepMove:
		add(s.Source)
		add(s.Target)
	case StepLoadModule:
		add(s.Source)
	default:
		add(s.Target)
	}
	return strings.Join(f, " ")
}

func modeString(m os.FileMode) string {
	v := uint32(m.Perm())
	if m&os.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

var flagNames = []struct {
	flag uintptr
	name string
}{
	{unix.MS_RDONLY, "ro"},
	{unix.MS_NOSUID, "nosuid"},
	{unix.MS_NODEV, "nodev"},
	{unix.MS_NOEXEC, "noexec"},
	{unix.MS_RELATIME, "relatime"},
}

func flagString(fl uintptr) string {
	var names []string
	for _, n := range flagNames {
		if fl&n.flag != 0 {
			names = append(names, n.name)
			fl &^= n.flag
		}
	}
	if fl != 0 {
		names = append(names, fmt.Sprintf("%#x", fl))
	}
	return strings.Join(names, ",")
}

// Mount points of the root's layers. They live under /run, which moves
// into the new root, so they stay reachable there (for shutdown).
const (
	BaseMount     = "/run/sandlot/base"
	WritableMount = "/run/sandlot/rw"
)

const (
	nsd  = unix.MS_NOSUID | unix.MS_NODEV
	nsde = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
)

// Plan is the boot sequence for cfg, computed without side effects:
// kernel filesystems, modules, then (with a base device) the overlay root
// — the base disk read-only below, the writable layer (or a tmpfs) above —
// into which /dev, /proc, /sys and /run move before the root switches.
func Plan(cfg Config) ([]Step, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var p planner
	p.mkdir("/dev", 0o755)
	p.mount("devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755").IfNotMounted = true
	p.add(Step{Kind: StepConsole, Target: "/dev/console"})
	p.mkdir("/proc", 0o555)
	p.mount("proc", "/proc", "proc", nsde, "").IfNotMounted = true
	p.mkdir("/sys", 0o555)
	p.mount("sysfs", "/sys", "sysfs", nsde, "").IfNotMounted = true
	p.mkdir("/dev/pts", 0o755)
	p.mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0620,ptmxmode=0666,gid=5")
	p.mkdir("/dev/shm", 0o777|os.ModeSticky)
	p.mount("tmpfs", "/dev/shm", "tmpfs", nsd, "mode=1777")
	p.mkdir("/run", 0o755)
	p.mount("tmpfs", "/run", "tmpfs", nsd, "mode=0755")
	if cfg.Cgroup {
		// The directory is provided by sysfs.
		p.mount("cgroup2", "/sys/fs/cgroup", "cgroup2", nsde, "nsdelegate")
	}
	for _, m := range cfg.Modules {
		p.add(Step{Kind: StepLoadModule, Source: m})
	}
	if cfg.BaseDevice == "" {
		if !cfg.DiskTmp {
			p.mkdir("/tmp", 0o777|os.ModeSticky)
			p.mount("tmpfs", "/tmp", "tmpfs", nsd, "mode=1777")
		}
		return p.steps, nil
	}
	p.root(cfg)
	return p.steps, nil
}

// root assembles the overlay root and switches into it.
func (p *planner) root(cfg Config) {
	p.add(Step{Kind: StepWaitDevice, Target: cfg.BaseDevice})
	p.mkdir(BaseMount, 0o755)
	p.mount(cfg.BaseDevice, BaseMount, cfg.BaseFSType, unix.MS_RDONLY, "").Hint = "(the read-only base disk)"
	p.mkdir(WritableMount, 0o755)
	if cfg.WritableDevice != "" {
		p.add(Step{Kind: StepWaitDevice, Target: cfg.WritableDevice})
		p.mount(cfg.WritableDevice, WritableMount, cfg.WritableFSType, unix.MS_RELATIME, "").Hint =
			fmt.Sprintf("(the writable layer must be formatted %s by the host)", cfg.WritableFSType)
	} else {
		p.mount("tmpfs", WritableMount, "tmpfs", unix.MS_NOSUID, "mode=0755")
	}
	upper, work := path.Join(WritableMount, "upper"), path.Join(WritableMount, "work")
	p.mkdir(upper, 0o755)
	p.mkdir(work, 0o755)
	p.mkdir(cfg.NewRoot, 0o755)
	p.mount("overlay", cfg.NewRoot, "overlay", 0,
		fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", BaseMount, upper, work))
	for _, d := range []string{"/dev", "/proc", "/sys", "/run"} {
		p.mkdir(path.Join(cfg.NewRoot, d), 0o755)
		p.add(Step{Kind: StepMove, Source: d, Target: path.Join(cfg.NewRoot, d)})
	}
	if !cfg.DiskTmp {
		p.mkdir(path.Join(cfg.NewRoot, "tmp"), 0o777|os.ModeSticky)
		p.mount("tmpfs", path.Join(cfg.NewRoot, "tmp"), "tmpfs", nsd, "mode=1777")
	}
	p.add(Step{Kind: StepSwitchRoot, Target: cfg.NewRoot})
}

type planner struct{ steps []Step }

func (p *planner) add(s Step) *Step {
	p.steps = append(p.steps, s)
	return &p.steps[len(p.steps)-1]
}

func (p *planner) mkdir(dir string, mode os.FileMode) {
	p.add(Step{Kind: StepMkdir, Target: dir, Mode: mode})
}

func (p *planner) mount(src, dst, fstype string, flags uintptr, data string) *Step {
	return p.add(Step{Kind: StepMount, Source: src, Target: dst, FSType: fstype, Flags: flags, Data: data})
}

func (c Config) validate() error {
	if c.WritableDevice != "" && c.BaseDevice == "" {
		return fmt.Errorf("pid1: a writable device (%s) needs a base device", c.WritableDevice)
	}
	for _, m := range c.Modules {
		if !path.IsAbs(m) {
			return fmt.Errorf("pid1: module %q: not an absolute path", m)
		}
	}
	for name, dev := range map[string]string{"base": c.BaseDevice, "writable": c.WritableDevice} {
		if dev != "" && !path.IsAbs(dev) {
			return fmt.Errorf("pid1: %s device %q: not an absolute path", name, dev)
		}
	}
	if c.BaseDevice != "" && c.BaseDevice == c.WritableDevice {
		return fmt.Errorf("pid1: base and writable device are both %s", c.BaseDevice)
	}
	if r := path.Clean(c.NewRoot); !path.IsAbs(r) || r == "/" || strings.HasPrefix(r, "/run/") ||
		r == "/run" || r == "/dev" || r == "/proc" || r == "/sys" {
		return fmt.Errorf("pid1: new root %q: must be an absolute directory outside / /dev /proc /sys /run", c.NewRoot)
	}
	return nil
}

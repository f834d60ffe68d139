package vm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ControlPortName is the virtio-serial port of the guest control channel;
// the guest sees it as /dev/virtio-ports/sandlot.control.
const ControlPortName = "sandlot.control"

// tcgKernelArgs keep a TCG guest from hanging in delay-loop calibration on
// microvm (no PIT channel 2 gate, no HPET); harmless under KVM.
const tcgKernelArgs = "tsc_early_khz=2000000 lpj=8000000 no_timer_check tsc=reliable"

// BaseKernelArgs is the guest kernel command line before the boot
// parameters of sandlot-guest.
const BaseKernelArgs = "console=ttyS0 quiet panic=-1 reboot=t " +
	"i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd " + tcgKernelArgs

// Spec is one QEMU microvm, as data; Args renders it.
type Spec struct {
	Name      string
	Accel     string // AccelKVM or AccelTCG
	VCPU      int
	MemoryMiB int
	// MemoryPath is the file backing guest RAM. Shared (share=on) for a
	// VM that will be snapshotted with x-ignore-shared; private
	// (share=off: a copy-on-write mapping) for a restore.
	MemoryPath   string
	SharedMemory bool
	// Kernel, Initrd and Append are for a cold boot only; a restore takes
	// everything from the snapshot.
	Kernel, Initrd, Append string
	BaseDisk               string // read-only base image
	Layer                  string // writable layer
	QMPSocket              string
	ControlSocket          string // QEMU listens; the host dials it
	// Console is the serial console's log: QEMU writes the console to
	// its stdout, and the VM keeps a capped log there; empty: no console.
	Console string
	// TapFD, when set, is the fd QEMU inherits the tap on (Net.Tap names
	// it for the caller, who opens it); otherwise QEMU opens Net.Tap.
	TapFD    int
	Net      NetSpec
	Incoming bool // -incoming defer: wait for migrate-incoming
	Sandbox  bool // QEMU's seccomp sandbox (no spawning: fd: migration only)
}

// NetSpec is the guest NIC: a tap device (a pod's) or user-mode
// networking with host port forwards (tests on a bare host).
type NetSpec struct {
	MAC      string
	Tap      string
	Forwards []PortForward
}

// PortForward forwards 127.0.0.1:HostPort to GuestIP:GuestPort (user mode).
type PortForward struct {
	HostPort  int
	GuestIP   string
	GuestPort int
}

// Args is the QEMU command line (without the binary).
func (s Spec) Args() ([]string, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	a := []string{"-name", s.Name, "-nodefaults", "-no-user-config", "-display", "none",
		"-m", fmt.Sprintf("%dM", s.MemoryMiB), "-smp", strconv.Itoa(s.VCPU)}
	a = append(a, s.cpuArgs()...)
	a = append(a, "-object", fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=%s,share=%s",
		s.MemoryMiB, s.MemoryPath, onOff(s.SharedMemory)))
	a = append(a, "-machine", s.machine())
	if s.Kernel != "" {
		a = append(a, "-kernel", s.Kernel, "-initrd", s.Initrd, "-append", s.Append)
	}
	a = append(a, disk("base", s.BaseDisk, true)...)
	a = append(a, disk("layer", s.Layer, false)...)
	a = append(a, "-device", "virtio-serial-device",
		"-chardev", "socket,id=ctl,path="+s.ControlSocket+",server=on,wait=off",
		"-device", "virtserialport,chardev=ctl,name="+ControlPortName)
	a = append(a, s.netArgs()...)
	a = append(a, serial(s.Console)...)
	a = append(a, "-qmp", "unix:"+s.QMPSocket+",server=on,wait=off", "-no-reboot")
	if s.Sandbox {
		a = append(a, "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny")
	}
	if s.Incoming {
		// The device state comes from xen-save-devices-state, which writes
		// no configuration section (it saves no RAM either).
		a = append(a, "-global", "migration.send-configuration=off", "-incoming", "defer")
	}
	return a, nil
}

func (s Spec) validate() error {
	var missing []string
	for name, v := range map[string]string{"memory path": s.MemoryPath, "base disk": s.BaseDisk, "layer": s.Layer,
		"QMP socket": s.QMPSocket, "control socket": s.ControlSocket} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	for _, p := range []string{s.MemoryPath, s.BaseDisk, s.Layer, s.QMPSocket, s.ControlSocket, s.Console, s.Kernel, s.Initrd} {
		// QEMU splits option strings at commas: a path with one could
		// smuggle in options (share=on, another file).
		if strings.ContainsAny(p, ",\n") {
			return fmt.Errorf("vm spec: path %q contains a comma or newline", p)
		}
	}
	switch {
	case len(missing) > 0:
		return fmt.Errorf("vm spec: missing %s", strings.Join(missing, ", "))
	case s.Accel != AccelKVM && s.Accel != AccelTCG:
		return fmt.Errorf("vm spec: unknown accel %q (want kvm or tcg)", s.Accel)
	case s.VCPU < 1 || s.MemoryMiB < 64:
		return fmt.Errorf("vm spec: %d vCPU, %d MiB: need at least 1 vCPU and 64 MiB", s.VCPU, s.MemoryMiB)
	case s.Kernel != "" && s.Initrd == "":
		return fmt.Errorf("vm spec: a kernel needs an initramfs (sandlot-guest as /init)")
	case s.Kernel == "" && !s.Incoming:
		return fmt.Errorf("vm spec: neither a kernel to boot nor an incoming state to restore")
	}
	return nil
}

// tcgTranslationMiB caps TCG's translation buffer. QEMU's default (1 GiB)
// is touched as guest code is translated and QEMU runs in its pod's
// cgroup, whose limit is the VM plus the RuntimeClass overhead (96 MiB):
// a guest JIT (node loading TypeScript) grew it until the cgroup
// OOM-killed QEMU. A restored idle VM dirties 32 MiB of it; with a cap
// full, it is flushed and refilled (below 32 MiB that cost shows:
// docs/benchmarks.md). SANDLOT_TCG_TB_MIB overrides it for measurements.
const tcgTranslationMiB = 48

// cpuArgs picks the accelerator's arguments.
func (s Spec) cpuArgs() []string {
	if s.Accel == AccelKVM {
		return []string{"-accel", "kvm", "-cpu", "host,-arch-capabilities"}
	}
	tb := tcgTranslationMiB
	if n, err := strconv.Atoi(os.Getenv("SANDLOT_TCG_TB_MIB")); err == nil && n > 0 {
		tb = n
	}
	return []string{"-accel", fmt.Sprintf("tcg,tb-size=%d", tb), "-cpu", "max"}
}

// machine is microvm with guest RAM in the memory backend. TCG needs the
// PIT and PIC to calibrate; KVM has kvmclock.
func (s Spec) machine() string {
	legacy := "pit=on,pic=on"
	if s.Accel == AccelKVM {
		legacy = "pit=off,pic=off"
	}
	return "microvm," + legacy + ",rtc=on,memory-backend=mem"
}

func disk(id, path string, readonly bool) []string {
	opts := "if=none,id=" + id + ",file=" + path + ",format=raw,cache=unsafe"
	if readonly {
		opts = "if=none,id=" + id + ",file=" + path + ",format=raw,readonly=on"
	}
	return []string{"-drive", opts, "-device", "virtio-blk-device,drive=" + id}
}

func (s Spec) netArgs() []string {
	netdev := "user,id=n0,restrict=on"
	switch {
	case s.TapFD > 0:
		netdev = "tap,id=n0,fd=" + strconv.Itoa(s.TapFD)
	case s.Net.Tap != "":
		netdev = "tap,id=n0,ifname=" + s.Net.Tap + ",script=no,downscript=no"
	}
	for _, f := range s.Net.Forwards {
		netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-%s:%d", f.HostPort, f.GuestIP, f.GuestPort)
	}
	dev := "virtio-net-device,netdev=n0"
	if s.Net.MAC != "" {
		dev += ",mac=" + s.Net.MAC
	}
	return []string{"-netdev", netdev, "-device", dev}
}

func serial(console string) []string {
	if console == "" {
		return []string{"-serial", "null"}
	}
	return []string{"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con"}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

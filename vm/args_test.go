package vm

import (
	"strings"
	"testing"
)

func bootSpec() Spec {
	return Spec{Name: "t", Accel: AccelTCG, VCPU: 1, MemoryMiB: 256, MemoryPath: "/dev/shm/t.mem", SharedMemory: true,
		Kernel: "/k/vmlinux", Initrd: "/k/initrd", Append: BaseKernelArgs, BaseDisk: "/d/base.ext4", Layer: "/d/layer.raw",
		QMPSocket: "/r/qmp.sock", ControlSocket: "/r/ctl.sock", Console: "/r/console.log",
		Net: NetSpec{MAC: "52:54:00:00:00:01", Forwards: []PortForward{{HostPort: 40001, GuestIP: "10.0.2.15", GuestPort: 49983}}}}
}

func TestArgs(t *testing.T) {
	restore := bootSpec()
	restore.Kernel, restore.Initrd, restore.Append, restore.SharedMemory, restore.Incoming = "", "", "", false, true
	kvm := bootSpec()
	kvm.Accel = AccelKVM
	tap := bootSpec()
	tap.Net = NetSpec{Tap: "tap0", MAC: "52:54:00:00:00:02"}
	tapFDSpec := tap
	tapFDSpec.TapFD = 3
	cases := []struct {
		name      string
		spec      Spec
		want, not []string
	}{
		{"cold boot under tcg", bootSpec(), []string{
			"-accel tcg,tb-size=48 -cpu max",
			"memory-backend-file,id=mem,size=256M,mem-path=/dev/shm/t.mem,share=on",
			"microvm,pit=on,pic=on,rtc=on,memory-backend=mem",
			"-kernel /k/vmlinux -initrd /k/initrd -append console=ttyS0",
			"file=/d/base.ext4,format=raw,readonly=on",
			"virtserialport,chardev=ctl,name=sandlot.control",
			"hostfwd=tcp:127.0.0.1:40001-10.0.2.15:49983",
			"virtio-net-device,netdev=n0,mac=52:54:00:00:00:01",
			"-chardev stdio,id=con,signal=off -serial chardev:con",
		}, []string{"-incoming"}},
		{"restore", restore, []string{"share=off", "-incoming defer"}, []string{"-kernel", "-append"}},
		{"kvm", kvm, []string{"-accel kvm -cpu host,-arch-capabilities", "microvm,pit=off,pic=off"}, []string{"-cpu max"}},
		{"tap", tap, []string{"tap,id=n0,ifname=tap0,script=no,downscript=no"}, []string{"user,id=n0"}},
		{"tap by fd", tapFDSpec, []string{"tap,id=n0,fd=3"}, []string{"user,id=n0", "ifname="}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args, err := tc.spec.Args()
			if err != nil {
				t.Fatal(err)
			}
			line := strings.Join(args, " ")
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("missing %q in\n%s", w, line)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(line, n) {
					t.Errorf("unexpected %q in\n%s", n, line)
				}
			}
		})
	}
}

func TestArgsRejects(t *testing.T) {
	mut := map[string]func(*Spec){
		"unknown accel":     func(s *Spec) { s.Accel = "hvf" },
		"no memory path":    func(s *Spec) { s.MemoryPath = "" },
		"no base disk":      func(s *Spec) { s.BaseDisk = "" },
		"kernel, no initrd": func(s *Spec) { s.Initrd = "" },
		"nothing to run":    func(s *Spec) { s.Kernel, s.Initrd = "", "" },
		"zero vCPU":         func(s *Spec) { s.VCPU = 0 },
		"too little memory": func(s *Spec) { s.MemoryMiB = 16 },
		"comma in a path":   func(s *Spec) { s.BaseDisk = "/d/base.ext4,share=on" },
	}
	for name, m := range mut {
		s := bootSpec()
		m(&s)
		if _, err := s.Args(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

package pid1

import (
	"strings"
	"testing"
)

var earlyMounts = []string{
	"mkdir /dev 0755",
	"mount devtmpfs /dev devtmpfs nosuid mode=0755 (if not mounted)",
	"console /dev/console",
	"mkdir /proc 0555",
	"mount proc /proc proc nosuid,nodev,noexec (if not mounted)",
	"mkdir /sys 0555",
	"mount sysfs /sys sysfs nosuid,nodev,noexec (if not mounted)",
	"mkdir /dev/pts 0755",
	"mount devpts /dev/pts devpts nosuid,noexec mode=0620,ptmxmode=0666,gid=5",
	"mkdir /dev/shm 1777",
	"mount tmpfs /dev/shm tmpfs nosuid,nodev mode=1777",
	"mkdir /run 0755",
	"mount tmpfs /run tmpfs nosuid,nodev mode=0755",
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Longer than 60 lines: a table, one row per case.
func TestPlan(t *testing.T) {
	modules := []string{"/lib/modules/virtio_mmio.ko", "/lib/modules/virtio_blk.ko"}
	overlayRoot := func(writable []string, tmp []string) []string {
		return concat([]string{
			"load-module /lib/modules/virtio_mmio.ko",
			"load-module /lib/modules/virtio_blk.ko",
			"wait-device /dev/vda",
			"mkdir /run/sandlot/base 0755",
			"mount /dev/vda /run/sandlot/base ext4 ro",
			"mkdir /run/sandlot/rw 0755",
		}, writable, []string{
			"mkdir /run/sandlot/rw/upper 0755",
			"mkdir /run/sandlot/rw/work 0755",
			"mkdir /newroot 0755",
			"mount overlay /newroot overlay lowerdir=/run/sandlot/base,upperdir=/run/sandlot/rw/upper,workdir=/run/sandlot/rw/work",
			"mkdir /newroot/dev 0755",
			"move /dev /newroot/dev",
			"mkdir /newroot/proc 0755",
			"move /proc /newroot/proc",
			"mkdir /newroot/sys 0755",
			"move /sys /newroot/sys",
			"mkdir /newroot/run 0755",
			"move /run /newroot/run",
		}, tmp, []string{"switch-root /newroot"})
	}
	newrootTmp := []string{"mkdir /newroot/tmp 1777", "mount tmpfs /newroot/tmp tmpfs nosuid,nodev mode=1777"}

	tests := []struct {
		name    string
		cfg     Config
		want    []string
		wantErr string
	}{{
		name: "initramfs only",
		cfg:  Config{},
		want: concat(earlyMounts, []string{"mkdir /tmp 1777", "mount tmpfs /tmp tmpfs nosuid,nodev mode=1777"}),
	}, {
		name: "initramfs only, cgroup, disk tmp, modules",
		cfg:  Config{Cgroup: true, DiskTmp: true, Modules: modules[:1]},
		want: concat(earlyMounts, []string{
			"mount cgroup2 /sys/fs/cgroup cgroup2 nosuid,nodev,noexec nsdelegate",
			"load-module /lib/modules/virtio_mmio.ko",
		}),
	}, {
		name: "base and writable disk",
		cfg:  Config{Modules: modules, BaseDevice: "/dev/vda", WritableDevice: "/dev/vdb"},
		want: concat(earlyMounts, overlayRoot([]string{
			"wait-device /dev/vdb",
			"mount /dev/vdb /run/sandlot/rw ext4 relatime",
		}, newrootTmp)),
	}, {
		name: "base only: tmpfs upper layer, disk tmp",
		cfg:  Config{Modules: modules, BaseDevice: "/dev/vda", DiskTmp: true},
		want: concat(earlyMounts, overlayRoot([]string{
			"mount tmpfs /run/sandlot/rw tmpfs nosuid mode=0755",
		}, nil)),
	}, {
		name: "other new root and filesystem types",
		cfg: Config{BaseDevice: "/dev/vda", BaseFSType: "erofs", WritableDevice: "/dev/vdb",
			WritableFSType: "xfs", NewRoot: "/mnt/root/", DiskTmp: true},
		want: concat(earlyMounts, []string{
			"wait-device /dev/vda",
			"mkdir /run/sandlot/base 0755",
			"mount /dev/vda /run/sandlot/base erofs ro",
			"mkdir /run/sandlot/rw 0755",
			"wait-device /dev/vdb",
			"mount /dev/vdb /run/sandlot/rw xfs relatime",
			"mkdir /run/sandlot/rw/upper 0755",
			"mkdir /run/sandlot/rw/work 0755",
			"mkdir /mnt/root 0755",
			"mount overlay /mnt/root overlay lowerdir=/run/sandlot/base,upperdir=/run/sandlot/rw/upper,workdir=/run/sandlot/rw/work",
			"mkdir /mnt/root/dev 0755",
			"move /dev /mnt/root/dev",
			"mkdir /mnt/root/proc 0755",
			"move /proc /mnt/root/proc",
			"mkdir /mnt/root/sys 0755",
			"move /sys /mnt/root/sys",
			"mkdir /mnt/root/run 0755",
			"move /run /mnt/root/run",
			"switch-root /mnt/root",
		}),
	}, {
		name:    "writable without base",
		cfg:     Config{WritableDevice: "/dev/vdb"},
		wantErr: "needs a base device",
	}, {
		name:    "relative module",
		cfg:     Config{Modules: []string{"virtio_blk.ko"}},
		wantErr: "not an absolute path",
	}, {
		name:    "same device twice",
		cfg:     Config{BaseDevice: "/dev/vda", WritableDevice: "/dev/vda"},
		wantErr: "both /dev/vda",
	}, {
		name:    "new root under /run",
		cfg:     Config{BaseDevice: "/dev/vda", NewRoot: "/run/root"},
		wantErr: "new root",
	}, {
		name:    "new root is /",
		cfg:     Config{BaseDevice: "/dev/vda", NewRoot: "/"},
		wantErr: "new root",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Plan(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := make([]string, len(plan))
			for i, s := range plan {
				got[i] = s.String()
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestPlanWritableHint(t *testing.T) {
	plan, err := Plan(Config{BaseDevice: "/dev/vda", WritableDevice: "/dev/vdb"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range plan {
		if s.Kind == StepMount && s.Source == "/dev/vdb" {
			if !strings.Contains(s.Hint, "formatted ext4 by the host") {
				t.Fatalf("hint %q", s.Hint)
			}
			return
		}
	}
	t.Fatal("no writable mount in plan")
}

package vmtest_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/vm"
)

// copySnapshot makes a writable copy of the parent snapshot to damage.
func copySnapshot(t *testing.T) string {
	t.Helper()
	snap, _ := snapshotOfParent(t)
	dst := filepath.Join(t.TempDir(), "snap")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(snap)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(snap, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func editManifest(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, snapshot.ManifestFile)
	b, _ := os.ReadFile(p)
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, _ = json.Marshal(m)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreRefusesBadSnapshots: each damage is a clear error before (or
// instead of) a broken VM, and leaves nothing running.
func TestRestoreRefusesBadSnapshots(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"corrupt device state", func(t *testing.T, dir string) {
			f, _ := os.OpenFile(filepath.Join(dir, snapshot.StateFile), os.O_WRONLY, 0)
			f.WriteAt([]byte("garbage!"), 100)
			f.Close()
		}, "device state is corrupt"},
		{"truncated memory", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, snapshot.MemoryFile), 4096)
		}, "truncated or replaced"},
		{"missing disk layer", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, snapshot.DiskFile))
		}, "no such file"},
		{"corrupt manifest", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, snapshot.ManifestFile), []byte("{not json"), 0o644)
		}, "corrupt manifest"},
		{"another QEMU", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["qemuVersion"] = "9.9.9" })
		}, "taken by QEMU 9.9.9"},
		{"another CPU", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["cpuFingerprint"] = "0000000000000000" })
		}, "CPU fingerprint 0000000000000000 differs"},
		{"another accel", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["accel"] = "kvm" })
		}, "taken under kvm"},
		{"newer format", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["version"] = 99 })
		}, "format version 99"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copySnapshot(t)
			tc.damage(t, dir)
			g := guest(t, "bad", "10.0.2.80", 80+i)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := config(t, g, "")
			cfg.Accel = vm.AccelTCG
			v, err := vm.Restore(ctx, "", cfg, dir, g.Identity, loadEnv(t).Roots())
			if err == nil {
				v.Stop()
				t.Fatal("restored a damaged snapshot")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if _, err := os.Stat(cfg.RunDir); err == nil {
				entries, _ := os.ReadDir(cfg.RunDir)
				if len(entries) > 0 {
					t.Fatalf("run dir left with %d entries", len(entries))
				}
			}
		})
	}
}

// TestBootRefusesBadInput: a missing kernel, a base disk that is not a
// filesystem and an unknown accel are clear errors.
func TestBootRefusesBadInput(t *testing.T) {
	env := loadEnv(t)
	notFS := filepath.Join(t.TempDir(), "junk.img")
	if err := os.WriteFile(notFS, make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(a *vm.Assets, c *vm.Config)
		env  string
		want string
	}{
		{"missing kernel", func(a *vm.Assets, c *vm.Config) { a.Kernel = "/nonexistent/vmlinux" }, "", "kernel /nonexistent/vmlinux"},
		{"rootfs not a filesystem", func(a *vm.Assets, c *vm.Config) { c.BaseDisk = notFS }, "", "(the read-only base disk)"},
		{"unknown accel", func(a *vm.Assets, c *vm.Config) { c.Accel = "" }, "hvf", "unknown accelerator"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("SANDLOT_ACCEL", tc.env)
			}
			g := guest(t, "badboot", "10.0.2.15", 90+i)
			a, cfg := env.Assets, config(t, g, env.Busy)
			tc.edit(&a, &cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			v, err := vm.Boot(ctx, a, cfg, g.Identity)
			if err == nil {
				v.Stop()
				t.Fatal("booted")
			}
			t.Logf("error: %v", err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

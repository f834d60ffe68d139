package vm

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBundleRoot: a binary at bin/ of a directory holding the manifest is
// a bundle's; the host's QEMU, a look-alike without the manifest and a
// binary elsewhere in a bundle are not.
func TestBundleRoot(t *testing.T) {
	dir := t.TempDir()
	bundle, fake := filepath.Join(dir, "qemu"), filepath.Join(dir, "fake")
	for _, f := range []string{filepath.Join(bundle, BundleManifest), filepath.Join(bundle, BundleBinary), filepath.Join(fake, BundleBinary)} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		qemu, want string
	}{
		{filepath.Join(bundle, BundleBinary), bundle},
		{filepath.Join(fake, BundleBinary), ""},
		{filepath.Join(bundle, "lib", "qemu-system-x86_64"), ""},
		{"/usr/bin/qemu-system-x86_64", ""},
	} {
		if got, ok := BundleRoot(tc.qemu); got != tc.want || ok != (tc.want != "") {
			t.Errorf("BundleRoot(%s) = %q, %v; want %q", tc.qemu, got, ok, tc.want)
		}
	}
}

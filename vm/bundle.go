package vm

import (
	"os"
	"path/filepath"
)

// A QEMU bundle is the relocatable QEMU the agent image ships
// (hack/qemu-bundle.sh) as a node holds it: the binary, every library it
// links with glibc's loader, the TCG module and the firmware, under one
// directory QEMU relocates its data and module paths to.
const (
	// BundleManifest names the bundle's QEMU and Debian package versions;
	// a directory holding it is a bundle.
	BundleManifest = "sandlot-qemu.json"
	// BundleBinary and BundleLoader are the QEMU binary and the loader its
	// PT_INTERP names, relative to the bundle's directory.
	BundleBinary = "bin/qemu-system-x86_64"
	BundleLoader = "lib/ld-linux-x86-64.so.2"
)

// BundleRoot is the directory of the bundle qemu (an absolute path) is
// the binary of; false when qemu is not a bundle's (the host's QEMU).
func BundleRoot(qemu string) (string, bool) {
	root := filepath.Dir(filepath.Dir(qemu))
	if filepath.Join(root, BundleBinary) != filepath.Clean(qemu) {
		return "", false
	}
	if fi, err := os.Stat(filepath.Join(root, BundleManifest)); err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	return root, true
}

// Package vmassets reads what `make vm-assets` (hack/vm-assets.sh) built
// into the cache: the guest kernel, initramfs and modules, the base disks
// and the sandbox images as OCI archives. The local cluster (internal/cluster)
// installs them on its nodes; the VM tests (test/vm) boot them.
package vmassets

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandlot-dev/sandlot/vm"
)

// Env is what `make vm-assets` built.
type Env struct {
	Assets vm.Assets
	Debian string // base disk with python3
	Busy   string // busybox base disk
	// Image is the same python3 rootfs as an OCI image archive for
	// ctr import, under ImageRef (the default sandbox image).
	Image, ImageRef string
	// InterpreterImage is the code-interpreter image (that tree plus the
	// data stack, pip, node and TypeScript), under InterpreterImageRef.
	InterpreterImage, InterpreterImageRef string
}

// Load reads $SANDLOT_CACHE/vm/current.env.
func Load() (Env, error) {
	cache := os.Getenv("SANDLOT_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "sandlot")
	}
	f, err := os.Open(filepath.Join(cache, "vm", "current.env"))
	if err != nil {
		return Env{}, fmt.Errorf("VM assets missing (%v): run `make vm-assets` (needs qemu-system-x86, debootstrap, e2fsprogs)", err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			kv[k] = v
		}
	}
	return Env{Assets: vm.Assets{Kernel: kv["SANDLOT_VM_KERNEL"], Initrd: kv["SANDLOT_VM_INITRD"], Modules: kv["SANDLOT_VM_MODULES"]},
		Debian: kv["SANDLOT_VM_BASE_DEBIAN"], Busy: kv["SANDLOT_VM_BASE_BUSYBOX"],
		Image: kv["SANDLOT_VM_IMAGE_DEBIAN"], ImageRef: kv["SANDLOT_VM_IMAGE_DEBIAN_REF"],
		InterpreterImage: kv["SANDLOT_VM_IMAGE_INTERPRETER"], InterpreterImageRef: kv["SANDLOT_VM_IMAGE_INTERPRETER_REF"]}, nil
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// virtioPortPrefix marks a --control value that names a virtio-serial
// port rather than a path.
const virtioPortPrefix = "virtio-port:"

// resolveControl turns "virtio-port:<name>" into the port's device node
// (/dev/vportNpM) found under sysfs; other values are paths already.
func resolveControl(sysfs, value string) (string, error) {
	name, ok := strings.CutPrefix(value, virtioPortPrefix)
	if !ok {
		return value, nil
	}
	ports, _ := filepath.Glob(filepath.Join(sysfs, "class", "virtio-ports", "*", "name"))
	for _, p := range ports {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSpace(string(b)) == name {
			return "/dev/" + filepath.Base(filepath.Dir(p)), nil
		}
	}
	return "", fmt.Errorf("no virtio-serial port named %q (is the virtio_console module loaded?)", name)
}

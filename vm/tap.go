package vm

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// tapFD is the fd a VM's QEMU inherits its tap on (the first ExtraFile).
const tapFD = 3

// openTap attaches a /dev/net/tun fd to the existing tap name in the
// calling thread's network namespace, with the flags QEMU itself would
// use (vnet header on: a snapshot's virtio-net state records it).
func openTap(name string) (*os.File, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return nil, fmt.Errorf("tap name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	// Not os.OpenFile: the runtime poller would take the fd.
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach to tap %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "tap:"+name), nil
}

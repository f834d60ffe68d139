package podnet

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// createTap makes a persistent tap in the calling thread's netns (tun
// devices are created in the netns of whoever opens /dev/net/tun, so this
// must run under Run; netlink handles cannot do it). IFF_TUN_EXCL refuses to
// adopt an existing device that may belong to someone else.
func createTap(name string, o options) error {
	fd, err := openTun(name, unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_TUN_EXCL)
	if err != nil {
		return err
	}
	// Until TUNSETPERSIST succeeds, closing fd destroys the device again,
	// so early returns need no cleanup.
	defer unix.Close(fd)
	if o.owner {
		if err := unix.IoctlSetInt(fd, unix.TUNSETOWNER, o.uid); err != nil {
			return fmt.Errorf("TUNSETOWNER %d: %w", o.uid, err)
		}
		if err := unix.IoctlSetInt(fd, unix.TUNSETGROUP, o.gid); err != nil {
			return fmt.Errorf("TUNSETGROUP %d: %w", o.gid, err)
		}
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return fmt.Errorf("TUNSETPERSIST: %w", err)
	}
	return nil
}

// openTun attaches a new /dev/net/tun fd to device name (creating it if it
// does not exist) with the given IFF_* flags.
func openTun(name string, flags uint16) (int, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return -1, fmt.Errorf("tap name %q: %w", name, err)
	}
	ifr.SetUint16(flags)
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return fd, nil
}

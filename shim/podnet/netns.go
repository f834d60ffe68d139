package podnet

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// errNSGone marks a netns that no longer exists; teardown treats it as done
// because the pod (and everything we created in it) is already gone.
var errNSGone = errors.New("network namespace is gone")

// openNS opens nsPath and checks it still is a namespace: after `ip netns
// del` or a CRI teardown the path is either missing or an unmounted file.
func openNS(nsPath string) (netns.NsHandle, error) {
	ns, err := netns.GetFromPath(nsPath)
	if errors.Is(err, fs.ErrNotExist) {
		return netns.None(), fmt.Errorf("open netns %s: %w (%w)", nsPath, errNSGone, err)
	}
	if err != nil {
		return netns.None(), fmt.Errorf("open netns %s: %w", nsPath, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(ns), &st); err != nil || st.Type != unix.NSFS_MAGIC {
		ns.Close()
		return netns.None(), fmt.Errorf("open netns %s: not a namespace mount: %w", nsPath, errNSGone)
	}
	return ns, nil
}

// Run calls fn on an OS thread that has entered the netns at nsPath, so that
// processes fn starts (exec.Cmd.Start forks from the calling thread) and tun
// devices it opens belong to the pod's network. Goroutines fn spawns do NOT
// run in the netns. fn runs on a fresh goroutine: if switching back fails the
// goroutine exits still locked and the Go runtime discards the tainted thread.
func Run(nsPath string, fn func() error) error {
	target, err := openNS(nsPath)
	if err != nil {
		return err
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() { errc <- runLocked(target, nsPath, fn) }()
	return <-errc
}

func runLocked(target netns.NsHandle, nsPath string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", nsPath, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// Stay locked: the thread dies with this goroutine instead of
		// running unrelated goroutines inside the pod's netns.
		return errors.Join(fnErr, fmt.Errorf("leave netns %s: %w", nsPath, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// podNS is a netlink handle bound to a pod's netns; it never moves the
// calling thread, so concurrent shim goroutines are unaffected.
type podNS struct {
	path string
	ns   netns.NsHandle // kept open for nftables connections
	h    *netlink.Handle
}

func dial(nsPath string) (*podNS, error) {
	ns, err := openNS(nsPath)
	if err != nil {
		return nil, err
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink handle in netns %s: %w", nsPath, err)
	}
	return &podNS{path: nsPath, ns: ns, h: h}, nil
}

func (n *podNS) Close() {
	n.h.Close()
	n.ns.Close()
}

// errorf formats "<what> in netns <path>: <err>".
func (n *podNS) errorf(err error, format string, args ...any) error {
	return fmt.Errorf("%s in netns %s: %w", fmt.Sprintf(format, args...), n.path, err)
}

func (n *podNS) link(name string) (netlink.Link, error) {
	l, err := n.h.LinkByName(name)
	if err != nil {
		return nil, n.errorf(err, "find link %s", name)
	}
	return l, nil
}

// dump retries netlink dumps the kernel flagged as interrupted (a concurrent
// change), which netlink v1.3 reports as ErrDumpInterrupted with partial data.
func dump[T any](list func() ([]T, error)) ([]T, error) {
	for i := 0; ; i++ {
		v, err := list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == 4 {
			return v, err
		}
	}
}

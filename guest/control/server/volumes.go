package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
)

// nfsOptions mount an E2B volume from the shim's NFSv3 server (one port
// for MOUNT and NFS, so no portmapper; no NLM, so nolock). No attribute
// or lookup caching and synchronous writes, as E2B mounts them: what a
// sandbox wrote is on the server before a pause or snapshot, and another
// sandbox sees it at once. hard: an I/O waits for the server (a restore
// brings another) instead of failing.
const nfsOptions = "vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,mountvers=3,nolock,hard," +
	"timeo=50,retrans=3,noac,lookupcache=none,rsize=1048576,wsize=1048576"

// mountTimeout bounds one mount: the call must answer even when the
// server does not (the mount is then reported failed).
const mountTimeout = 15 * time.Second

// unmountVolumes drops the mounts the previous identity had. Every
// identity mounts again (mountVolumes): after a restore the mounts in
// memory point at a server that is gone — E2B remounts on each /init.
func (h *Handler) unmountVolumes(had []identity.Volume) error {
	h.volumesMu.Lock()
	defer h.volumesMu.Unlock()
	var errs []error
	for _, v := range had {
		errs = append(errs, unmountStale(v.Path))
	}
	h.mounted = nil
	return errors.Join(errs...)
}

// mountVolumesMethod mounts the identity's volumes not mounted yet.
func (h *Handler) mountVolumesMethod(_ context.Context, _ json.RawMessage) (any, error) {
	t0 := time.Now()
	id := h.store.Get()
	h.volumesMu.Lock()
	defer h.volumesMu.Unlock()
	if len(id.Volumes) == 0 {
		return control.MountVolumesResult{}, nil
	}
	server, err := netip.ParseAddr(id.VolumeServer)
	if err != nil || !server.Is4() {
		return nil, fmt.Errorf("volume server %q is not an IPv4 address", id.VolumeServer)
	}
	for _, v := range id.Volumes {
		if slices.Contains(h.mounted, v) {
			continue
		}
		if err := mountVolume(server, v); err != nil {
			return nil, err
		}
		h.mounted = append(h.mounted, v)
	}
	return control.MountVolumesResult{Mounted: len(h.mounted), TookNanos: time.Since(t0).Nanoseconds()}, nil
}

// unmountStale forces the old mount off (aborting RPCs to a gone
// server), lazily when something still uses it.
func unmountStale(path string) error {
	err := unix.Unmount(path, unix.MNT_FORCE)
	if err == unix.EBUSY {
		err = unix.Unmount(path, unix.MNT_DETACH)
	}
	if err != nil && err != unix.EINVAL && err != unix.ENOENT { // EINVAL: not mounted
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

// mountVolume mounts v from server (nosuid, nodev: a volume is shared
// with other sandboxes).
func mountVolume(server netip.Addr, v identity.Volume) error {
	if err := os.MkdirAll(v.Path, 0o755); err != nil {
		return fmt.Errorf("volume %s: %w", v.Export, err)
	}
	src := server.String() + ":/" + v.Export
	opts := nfsOptions + ",addr=" + server.String()
	done := make(chan error, 1)
	go func() { done <- unix.Mount(src, v.Path, "nfs", unix.MS_SYNCHRONOUS|unix.MS_NOSUID|unix.MS_NODEV, opts) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("mount volume %s at %s: %w", v.Export, v.Path, err)
		}
		return nil
	case <-time.After(mountTimeout):
		return fmt.Errorf("mount volume %s at %s: no answer from %s in %v", v.Export, v.Path, server, mountTimeout)
	}
}

// networkFS are the filesystem types a snapshot does not flush: their
// data is on a server (a volume, mounted sync: nothing is dirty), and a
// sync(2) that waits on an unanswered NFS call would hold the snapshot,
// with the parent VM paused, as long as the server stays away.
var networkFS = map[string]bool{"nfs": true, "nfs4": true, "cifs": true, "smb3": true}

// syncLocal flushes every local filesystem (syncfs(2) per mount), so the
// disk layer the host persists next matches the memory image, never
// waiting on a network filesystem. Unreadable mount points (shadowed,
// gone) are skipped: what they hold is flushed through the mount above.
func syncLocal() {
	mounts, err := mountinfo.GetMounts(localFS)
	if err != nil {
		unix.Sync() // no mount table (no /proc): all of them
		return
	}
	for _, m := range mounts {
		fd, err := unix.Open(m.Mountpoint, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		_ = unix.Syncfs(fd)
		unix.Close(fd)
	}
}

// localFS keeps the mounts a snapshot flushes: all but networkFS's.
func localFS(m *mountinfo.Info) (skip, stop bool) { return networkFS[m.FSType], false }

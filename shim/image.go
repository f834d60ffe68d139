package shim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/core/mount"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sandlot-dev/sandlot/api/snapshot"
)

// imageDigest asks containerd for the digest of the image the container
// was created from (CRI passes only its name).
func imageDigest(ctx context.Context, address, namespace, name string) (string, error) {
	if name == "" {
		return "", errors.New("the container has no image name annotation (io.kubernetes.cri.image-name): sandlot runs CRI pods")
	}
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("connect to containerd at %s: %w", address, err)
	}
	defer conn.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, "containerd-namespace", namespace)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := imagesapi.NewImagesClient(conn).Get(ctx, &imagesapi.GetImageRequest{Name: name})
	if err != nil {
		return "", fmt.Errorf("image %s: %w", name, err)
	}
	return resp.GetImage().GetTarget().GetDigest(), nil
}

// baseDisk returns the ext4 base disk of an image: built from the
// container's rootfs once per image digest and cached on the node. Pods
// starting together wait for one build (an flock on the cache entry).
func baseDisk(ctx context.Context, dir, digest string, rootfs []*types.Mount, mountpoint string) (string, error) {
	if !strings.HasPrefix(digest, "sha256:") || strings.ContainsAny(digest, "/ ") {
		return "", fmt.Errorf("image digest %q is not a sha256 digest", digest)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	disk := filepath.Join(dir, strings.Replace(digest, ":", "-", 1)+".ext4")
	unlock, err := lockFile(disk + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(disk); err == nil {
		return disk, nil
	}
	start := time.Now()
	defer uncapped()() // mkfs.ext4 writes the disk as the shim's child
	if err := buildDisk(rootfs, mountpoint, disk); err != nil {
		return "", fmt.Errorf("base disk for image %s: %w", digest, err)
	}
	// Its sha256 once, now: every snapshot's manifest records it.
	if _, err := snapshot.DiskSHA256(disk); err != nil {
		return "", err
	}
	logf(ctx, "base disk %s built in %v", disk, time.Since(start))
	return disk, nil
}

// lockFile takes an exclusive flock, released by the returned function.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// buildDisk mounts the rootfs and copies it into a fresh ext4 image
// (mkfs.ext4 -d), written beside the target and renamed into place.
func buildDisk(rootfs []*types.Mount, mountpoint, disk string) error {
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		return err
	}
	if err := mount.All(toMounts(rootfs), mountpoint); err != nil {
		return fmt.Errorf("mount rootfs: %w", err)
	}
	defer func() { _ = mount.UnmountAll(mountpoint, 0) }()
	size, err := diskSize(mountpoint)
	if err != nil {
		return err
	}
	tmp := disk + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(tmp, size); err != nil {
		return err
	}
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-O", "^has_journal",
		"-E", "root_owner=0:0,nodiscard", "-L", "sandlot-base", "-d", mountpoint, tmp).CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("mkfs.ext4 -d: %w: %s", err, out)
	}
	if err := os.Chmod(tmp, 0o400); err != nil {
		return err
	}
	return os.Rename(tmp, disk)
}

// diskSize is the tree's blocks and inodes with 10 % + 32 MiB headroom.
func diskSize(root string) (int64, error) {
	var blocks, entries int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entries++
		if info, err := d.Info(); err == nil && (d.Type().IsRegular() || d.IsDir()) {
			blocks += (info.Size() + 4095) / 4096
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measure rootfs: %w", err)
	}
	bytes := (blocks*4096+entries*512)*11/10 + 32<<20
	return (bytes + 1<<20 - 1) &^ (1<<20 - 1), nil
}

func toMounts(ms []*types.Mount) []mount.Mount {
	out := make([]mount.Mount, 0, len(ms))
	for _, m := range ms {
		out = append(out, mount.Mount{Type: m.Type, Source: m.Source, Target: m.Target, Options: m.Options})
	}
	return out
}

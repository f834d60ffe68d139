package shim

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/containerd/errdefs"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/shim/podnet"
	"github.com/sandlot-dev/sandlot/shim/volnfs"
)

// volumeOwner owns every file the guest creates on a volume: E2B's
// `user` (uid and gid 1000), whoever the guest says it is (root in a guest
// must not plant root-owned files other sandboxes see).
const volumeOwner = 1000

// podVolume is one volume as the shim serves it.
type podVolume struct {
	sandlotv1.PodVolume
	Dir string // <VolumeDir>/<pod namespace>/<uid>
}

var namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// volumesOf places the annotated volumes under the node's volume
// directory, in the pod's own namespace only: the annotation (written by
// the controller alone) names UIDs, never paths.
func volumesOf(vs []sandlotv1.PodVolume, namespace, volumeDir string) ([]podVolume, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	if volumeDir == "" {
		return nil, fmt.Errorf("%w: the pod mounts volumes (%s) but this node has no volume storage (the chart's volumes.hostPath)",
			errdefs.ErrFailedPrecondition, sandlotv1.AnnotationVolumes)
	}
	if !namespaceRE.MatchString(namespace) {
		return nil, fmt.Errorf("%w: the pod's namespace %q (CRI annotation) is not a namespace name", errdefs.ErrInvalidArgument, namespace)
	}
	out := make([]podVolume, 0, len(vs))
	for _, v := range vs {
		dir := filepath.Join(volumeDir, namespace, v.UID)
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%w: volume %s: its directory %s is not there (made by sandlot-api)", errdefs.ErrFailedPrecondition, v.Name, dir)
		}
		out = append(out, podVolume{PodVolume: v, Dir: dir})
	}
	return out, nil
}

// guestVolumes is what the guest mounts, from the resolver's address.
func guestVolumes(vs []podVolume) ([]identity.Volume, string) {
	if len(vs) == 0 {
		return nil, ""
	}
	out := make([]identity.Volume, len(vs))
	for i, v := range vs {
		out[i] = identity.Volume{Export: v.Name, Path: v.Path}
	}
	return out, resolverAddr.String()
}

// serveVolumes listens for the VM's NFS on the resolver's address inside
// the netns: only this VM reaches that listener, so it serves only this
// sandbox's exports.
func (g *guard) serveVolumes(netns string, vs []podVolume) error {
	exports := make([]volnfs.Export, len(vs))
	for i, v := range vs {
		exports[i] = volnfs.Export{Name: v.Name, Dir: v.Dir, UID: volumeOwner, GID: volumeOwner}
	}
	srv, err := volnfs.New(exports)
	if err != nil {
		return fmt.Errorf("the VM's volume server: %w", err)
	}
	var l net.Listener
	addr := net.JoinHostPort(resolverAddr.String(), fmt.Sprint(podnet.VolumePort))
	err = podnet.Run(netns, func() (err error) {
		l, err = net.Listen("tcp4", addr)
		return err
	})
	if err != nil {
		srv.Close()
		return fmt.Errorf("listen for the VM's volumes on %s: %w", addr, err)
	}
	// Close stops the server and closes the listener it serves.
	g.closers = append([]func() error{srv.Close}, g.closers...)
	go func() { _ = srv.Serve(l) }()
	return nil
}

// mountVolumes has a (re)started VM mount its volumes, once its network
// is open: setIdentity dropped the mounts its memory held.
func (p *pod) mountVolumes(ctx context.Context, m machine) error {
	if len(p.identity.Volumes) == 0 {
		return nil
	}
	t0 := time.Now()
	if err := m.Guest().MountVolumes(ctx); err != nil {
		return fmt.Errorf("the guest's volumes: %w", err)
	}
	logf(ctx, "pod %s: %d volumes mounted in %v", p.uid, len(p.identity.Volumes), time.Since(t0).Round(time.Millisecond))
	return nil
}

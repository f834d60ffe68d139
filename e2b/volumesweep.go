package e2b

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// volumeFilesOwner owns a volume's files (E2B's `user`, uid and gid 1000), as
// the shims' NFS servers make them.
const volumeFilesOwner = 1000

// volumeDir is where a volume's files are.
func (s *Server) volumeDir(vol *sandlotv1.Volume) string {
	return filepath.Join(s.cfg.VolumeDir, vol.Namespace, string(vol.UID))
}

// readyVolume makes the volume's directory and says Ready (or Failed,
// with why). A Volume made with kubectl gets the finalizer here too.
func (s *Server) readyVolume(ctx context.Context, vol *sandlotv1.Volume) *apiError {
	phase, msg := sandlotv1.VolumeReady, ""
	if err := makeVolumeDir(s.volumeDir(vol)); err != nil {
		phase, msg = sandlotv1.VolumeFailed, err.Error()
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &sandlotv1.Volume{}
		if err := s.kube.direct.Get(ctx, client.ObjectKeyFromObject(vol), cur); err != nil {
			return err
		}
		if controllerutil.AddFinalizer(cur, sandlotv1.FinalizerVolumeData) {
			if err := s.kube.Update(ctx, cur); err != nil {
				return err
			}
		}
		cur.Status.Phase, cur.Status.Message = phase, msg
		if err := s.kube.Status().Update(ctx, cur); err != nil {
			return err
		}
		cur.DeepCopyInto(vol)
		return nil
	})
	if err != nil {
		return errorf(http.StatusInternalServerError, "volume %s status: %v", vol.Name, err)
	}
	if phase == sandlotv1.VolumeFailed {
		return errorf(http.StatusInternalServerError, "volume %s: %s", vol.Name, msg)
	}
	return nil
}

// makeVolumeDir makes <root>/<ns>/<uid>. The API runs as the volumes'
// owner (the chart's volumes.hostPath), so what it makes is the owner's;
// the namespace level is 0711 (nobody lists a team's volumes).
func makeVolumeDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return fmt.Errorf("make the volume's directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make the volume's directory: %w", err)
	}
	if err := os.Lchown(dir, volumeFilesOwner, volumeFilesOwner); err != nil && !errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("own the volume's directory: %w", err)
	}
	return nil
}

// finalizeVolume removes a deleted volume's files, then its finalizer.
func (s *Server) finalizeVolume(ctx context.Context, vol *sandlotv1.Volume) error {
	if err := os.RemoveAll(s.volumeDir(vol)); err != nil {
		return fmt.Errorf("remove the files of volume %s: %w", vol.Name, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &sandlotv1.Volume{}
		if err := s.kube.direct.Get(ctx, client.ObjectKeyFromObject(vol), cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		if cur.UID != vol.UID || !controllerutil.RemoveFinalizer(cur, sandlotv1.FinalizerVolumeData) {
			return nil
		}
		return client.IgnoreNotFound(s.kube.Update(ctx, cur))
	})
}

// KeepVolumes makes the directories of new volumes (kubectl's too) and
// removes those of deleted ones, every volumeSweepEvery until ctx ends.
func (s *Server) KeepVolumes(ctx context.Context) {
	if s.cfg.VolumeDir == "" {
		return
	}
	tick := time.NewTicker(volumeSweepEvery)
	defer tick.Stop()
	for {
		for _, ns := range s.cfg.Namespaces() {
			s.sweepVolumes(ctx, ns)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *Server) sweepVolumes(ctx context.Context, ns string) {
	var list sandlotv1.VolumeList
	if err := s.kube.List(ctx, &list, client.InNamespace(ns)); err != nil {
		s.cfg.Log.Warn("sweep volumes", "namespace", ns, "error", err)
		return
	}
	for i := range list.Items {
		v := &list.Items[i]
		var err error
		switch {
		case v.DeletionTimestamp != nil:
			err = s.finalizeVolume(ctx, v)
		case v.Status.Phase == "" || v.Status.Phase == sandlotv1.VolumePending:
			if aerr := s.readyVolume(ctx, v); aerr != nil {
				err = errors.New(aerr.Message)
			}
		}
		if err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("sweep volume", "namespace", ns, "volume", v.Name, "error", err)
		}
	}
}

// OpenVolume is the volume content API's access: the volume of that ID
// whose token this is, in any served namespace, opened as a root its
// paths cannot leave.
func (s *Server) OpenVolume(ctx context.Context, volumeID, token string) (*os.Root, error) {
	if aerr := s.volumesEnabled(); aerr != nil {
		return nil, aerr
	}
	for _, ns := range s.cfg.Namespaces() {
		vol := &sandlotv1.Volume{}
		if err := s.kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: volumeID}, vol); err != nil || vol.DeletionTimestamp != nil {
			continue
		}
		keys, err := s.teamKeyValues(ctx, ns)
		if err != nil {
			return nil, errorf(http.StatusInternalServerError, "keys of team %s: %v", ns, err)
		}
		ok := false
		for _, k := range keys {
			ok = hmac.Equal([]byte(volumeSignature(k, vol)), []byte(token)) || ok
		}
		if !ok {
			continue
		}
		if vol.Status.Phase != sandlotv1.VolumeReady {
			return nil, errorf(http.StatusConflict, "volume %s is not ready (phase %q)", volumeID, vol.Status.Phase)
		}
		root, err := os.OpenRoot(s.volumeDir(vol))
		if err != nil {
			return nil, errorf(http.StatusInternalServerError, "open volume %s: %v", volumeID, err)
		}
		return root, nil
	}
	return nil, errorf(http.StatusUnauthorized, "invalid volume token, or no volume %q", volumeID)
}

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
)

// A snapshot's manifest names two files outside its directory by the
// absolute path they had on the node that took it: the memory base of a
// restored VM (another key of the store) and the image's base disk (the
// shim's image cache). Another node has neither path. Before Commit the
// agent rewrites both relative to the snapshot's directory — the store
// keeps every key at <root>/<key> on every node — and, for a store other
// nodes read, puts the base disk into the store itself as
// disks/<sha256>. The keys a snapshot refers to are its dependencies: a
// restore opens them too, and its remote status waits for them.

// baseDiskFile is the base disk's name inside its disks/<sha256> key.
const baseDiskFile = "base.ext4"

// layout rewrites and resolves snapshot references in one store.
type layout struct {
	store store.Store
	// shared: other nodes may restore from this store, so base disks go
	// into it.
	shared bool
	diskMu sync.Mutex // one writer per base disk key
}

// root is the store's directory on this node, given a key and its Dir.
func storeRoot(dir, key string) (string, error) {
	root, ok := strings.CutSuffix(dir, "/"+key)
	if !ok || key == "" {
		return "", fmt.Errorf("store directory %s does not end in its key %s", dir, key)
	}
	return root, nil
}

// makePortable rewrites the manifest in key's directory (not committed
// yet) so it restores on any node of the store.
func (l *layout) makePortable(ctx context.Context, key string) error {
	dir := l.store.Dir(key)
	m, err := snapshot.ReadManifest(dir)
	if err != nil {
		return err
	}
	root, err := storeRoot(dir, key)
	if err != nil {
		return err
	}
	changed := false
	if filepath.IsAbs(m.Memory.Path) {
		if !within(root, m.Memory.Path) {
			if l.shared {
				return fmt.Errorf("memory base %s is outside the store %s: other nodes could never restore it", m.Memory.Path, root)
			}
		} else if m.Memory.Path, err = filepath.Rel(dir, m.Memory.Path); err != nil {
			return err
		}
		changed = true
	}
	switch {
	case filepath.IsAbs(m.BaseDisk.Path) && within(root, m.BaseDisk.Path):
		// In the store already (a VM restored from a shared snapshot maps
		// the store's disks/<sha256>): by this node's path, which another
		// node's copy of the store does not have.
		if m.BaseDisk.Path, err = filepath.Rel(dir, m.BaseDisk.Path); err != nil {
			return err
		}
		changed = true
	case l.shared && filepath.IsAbs(m.BaseDisk.Path):
		disk, err := l.shareBaseDisk(ctx, m.BaseDisk)
		if err != nil {
			return err
		}
		if m.BaseDisk.Path, err = filepath.Rel(dir, disk); err != nil {
			return err
		}
		changed = true
	}
	if !changed {
		return nil
	}
	return m.Write(dir)
}

// shareBaseDisk puts a base disk into the store once per sha256 (a hard
// link when the image cache shares the store's filesystem, else a copy)
// and returns its path there.
func (l *layout) shareBaseDisk(ctx context.Context, disk snapshot.FileRef) (string, error) {
	if len(disk.SHA256) != 64 {
		return "", fmt.Errorf("base disk %s has no sha256 in the manifest", disk.Path)
	}
	key := "disks/" + disk.SHA256
	dst := filepath.Join(l.store.Dir(key), baseDiskFile)
	l.diskMu.Lock()
	defer l.diskMu.Unlock()
	// Committed and not Failed: shared already, or under way. A Failed
	// upload is committed afresh (a new upload run) below.
	if st, err := l.store.Status(ctx, key); err == nil && st.Remote != store.RemoteFailed {
		return dst, nil
	}
	if err := discardUncommitted(ctx, l.store, key); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	if err := linkOrCopy(disk.Path, dst); err != nil {
		return "", fmt.Errorf("base disk into the store: %w", err)
	}
	// Its sha256 sidecar (snapshot.DiskSHA256) goes in with it, committed
	// and signed: a snapshot of a VM restored from here reads it rather
	// than hash the disk and write an unsigned file into the shared store.
	if err := snapshot.WriteDiskSum(dst, disk.SHA256); err != nil {
		return "", fmt.Errorf("base disk's sha256 into the store: %w", err)
	}
	if _, err := l.store.Commit(ctx, key); err != nil {
		return "", fmt.Errorf("commit base disk %s: %w", key, err)
	}
	return dst, nil
}

// discardUncommitted removes what an unfinished write of key left on this
// node, through the store (it knows its layout and records). Nothing
// there: nothing to do — the store is not even asked, so a remote that is
// down does not hold up a first attempt.
func discardUncommitted(ctx context.Context, st store.Store, key string) error {
	if _, err := os.Stat(st.Dir(key)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := st.Delete(ctx, key); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("discard partial data of %s: %w", key, err)
	}
	return nil
}

// deps are the store keys key's manifest refers to.
func (l *layout) deps(key string) ([]string, error) {
	dir := l.store.Dir(key)
	m, err := snapshot.ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	root, err := storeRoot(dir, key)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, ref := range []snapshot.FileRef{m.Memory, m.BaseDisk} {
		if filepath.IsAbs(ref.Path) || !strings.HasPrefix(ref.Path, "..") {
			continue // inside the snapshot, or a node-local path (local store)
		}
		p := ref.Abs(dir)
		if !within(root, p) {
			return nil, fmt.Errorf("snapshot %s refers to %s, outside the store", key, ref.Path)
		}
		k, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// remote is key's remote status together with its dependencies': another
// node can restore it only when all of them are Ready.
func (l *layout) remote(ctx context.Context, key string) (store.Status, error) {
	st, err := l.store.Status(ctx, key)
	if err != nil || st.Remote != store.RemoteReady {
		return st, err
	}
	deps, err := l.deps(key)
	if err != nil {
		return store.Status{}, err
	}
	for _, d := range deps {
		ds, err := l.confirm(ctx, d)
		if err != nil {
			return store.Status{}, fmt.Errorf("%s depends on %s: %w", key, d, err)
		}
		if ds.Remote != store.RemoteReady {
			ds.Message = fmt.Sprintf("waiting for %s: %s", d, ds.Message)
			return ds, nil
		}
		if ds.ReadyTime.After(st.ReadyTime) {
			st.ReadyTime = ds.ReadyTime
		}
	}
	return st, nil
}

// confirm is a dependency's status as another node would find it: a
// store that can check its record against the remote does (store.S3's
// Confirm), so a dependent is never remote Ready on a stale record.
func (l *layout) confirm(ctx context.Context, key string) (store.Status, error) {
	if c, ok := l.store.(interface {
		Confirm(context.Context, string) (store.Status, error)
	}); ok {
		return c.Confirm(ctx, key)
	}
	return l.store.Status(ctx, key)
}

// open makes key and its dependencies available on this node (downloads
// them if another node wrote them, checked: store.ErrIntegrity) and
// returns key's directory once its manifest names only files in the
// store (confine); release lets the store delete them again.
func (l *layout) open(ctx context.Context, key string) (string, func(), error) {
	dir, release, err := l.store.Open(ctx, key)
	if err != nil {
		return "", nil, err
	}
	releases := []func(){release}
	releaseAll := func() {
		for _, r := range releases {
			r()
		}
	}
	deps, err := l.deps(key)
	if err != nil {
		releaseAll()
		return "", nil, err
	}
	for _, d := range deps {
		_, r, err := l.store.Open(ctx, d)
		if err != nil {
			releaseAll()
			return "", nil, fmt.Errorf("%s depends on %s: %w", key, d, err)
		}
		releases = append(releases, r)
	}
	if err := l.confine(key, dir); err != nil {
		releaseAll()
		return "", nil, err
	}
	return dir, releaseAll, nil
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// linkOrCopy hard-links src to dst, or copies it across filesystems.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o400)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
)

// readMarker reads key's completion marker: ErrNotReady when objects
// exist without it, ErrNotFound when nothing does.
func (s *S3) readMarker(ctx context.Context, key string) (marker, error) {
	var m marker
	name := s.object(key, markerName)
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, name, minio.GetObjectOptions{})
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(obj, 16<<20))
		obj.Close()
	}
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return m, s.noMarker(ctx, key)
	}
	if err != nil {
		return m, fmt.Errorf("get s3://%s/%s: %w", s.cfg.Bucket, name, err)
	}
	if m, err = s.openMarker(key, data); err != nil {
		return m, fmt.Errorf("s3://%s/%s: %w", s.cfg.Bucket, name, err)
	}
	return m, nil
}

// noMarker tells an upload under way (or abandoned) from nothing at all.
func (s *S3) noMarker(ctx context.Context, key string) error {
	ctx, cancel := context.WithCancel(ctx) // stops the lister after one
	defer cancel()
	prefix := s.object(key, "")
	for o := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true, MaxKeys: 1}) {
		if o.Err != nil {
			return fmt.Errorf("list s3://%s/%s: %w", s.cfg.Bucket, prefix, o.Err)
		}
		return fmt.Errorf("%w: s3://%s/%s has objects but no completion marker (the upload is under way on another node, or failed)", ErrNotReady, s.cfg.Bucket, prefix)
	}
	return ErrNotFound
}

// checkMarker refuses a marker that could write outside the key's dir.
func checkMarker(key string, m marker) error {
	if m.Key != key {
		return fmt.Errorf("completion marker of %s names key %q", key, m.Key)
	}
	for _, f := range m.Files {
		bad := f.Path == "" || path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path ||
			f.Path == ".." || strings.HasPrefix(f.Path, "../") || f.Size < 0 || !extentsWithin(f)
		if bad {
			return fmt.Errorf("completion marker of %s has a bad file entry %q", key, f.Path)
		}
	}
	return nil
}

// extentsWithin: sorted, disjoint runs inside the file.
func extentsWithin(f fileEntry) bool {
	end := int64(0)
	for _, e := range f.Extents {
		if e[0] < end || e[1] < 0 || e[0]+e[1] > f.Size {
			return false
		}
		end = e[0] + e[1]
	}
	return true
}

// fetch downloads key into a temporary dir, verifying the signed
// marker first and every file's sha256 as it lands (s3verify.go), and
// only then moves it to Dir(key): a failure, a failed check included,
// removes the partial copy and never leaves data where Open's callers
// look.
func (s *S3) fetch(ctx context.Context, key string) error {
	start := time.Now()
	m, err := s.readMarker(ctx, key)
	if err != nil {
		return fmt.Errorf("store: open %s: %w", key, err)
	}
	s.trim(ctx, storedBytes(m)) // room first: the cap is meant to keep the disk from filling
	tmp, err := os.MkdirTemp(filepath.Join(s.root, metaDir, "tmp"), escapeKey(key)+"-")
	if err != nil {
		return s.fetchErr(key, m, err)
	}
	installed := false
	defer func() {
		if !installed {
			os.RemoveAll(tmp)
		}
	}()
	if err := s.download(ctx, key, m, tmp); err != nil {
		return s.fetchErr(key, m, err)
	}
	if err := s.checkManifest(key, m, tmp); err != nil {
		return s.fetchErr(key, m, err)
	}
	if err := s.install(key, m, tmp); err != nil {
		return s.fetchErr(key, m, err)
	}
	installed = true
	el := time.Since(start)
	s.cfg.Logf("store: downloaded %s: %d bytes in %s (%.1f MB/s)", key, m.Bytes, el.Round(time.Millisecond), float64(m.Bytes)/1e6/el.Seconds())
	s.cached(ctx, key) // key's own lock is held: the trim skips it
	return nil
}

func (s *S3) fetchErr(key string, m marker, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("store: open %s: the cache %s is full (the snapshot needs up to %d bytes): %w", key, s.root, m.Bytes, err)
	}
	return fmt.Errorf("store: open %s: download: %w", key, err)
}

// install records the download, then renames it into place. A crash in
// between leaves a state without a dir, which the next Open fetches again.
func (s *S3) install(key string, m marker, tmp string) error {
	st := s3State{Key: key, Origin: originRemote, Remote: RemoteReady, Bytes: m.Bytes, CommitTime: m.ReadyTime, ReadyTime: m.ReadyTime}
	for _, f := range m.Files {
		st.Files = append(st.Files, upFile{fileEntry: f, Uploaded: true})
	}
	if err := writeJSON(s.statePath(key), st); err != nil {
		return err
	}
	dst := s.Dir(key)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dst))
}

// part is one ranged GET: n bytes at off in the object, written at at
// in dst (they differ for a sparse file's packed object), the file'th
// of the marker's files.
type part struct {
	name       string // object
	off, n, at int64
	dst        *os.File
	file       int
	objSize    int64 // what the signed marker says the object holds
}

// download fetches every file of m into dir with parallel ranged GETs.
func (s *S3) download(ctx context.Context, key string, m marker, dir string) error {
	files, err := createFiles(dir, m.Files)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err != nil {
		return err
	}
	var parts []part
	for i, f := range m.Files {
		var packed int64 // where the run starts in the object
		for _, r := range f.runs() {
			for d := int64(0); d < r[1]; d += s.cfg.PartSize {
				parts = append(parts, part{name: s.object(key, f.Path), off: packed + d, n: min(s.cfg.PartSize, r[1]-d),
					at: r[0] + d, dst: files[i], file: i, objSize: f.objectSize()})
			}
			packed += r[1]
		}
	}
	if err := s.getParts(ctx, key, parts, m.Files); err != nil {
		return err
	}
	for i, f := range files {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", f.Name(), err)
		}
		if err := f.Chmod(m.Files[i].Mode.Perm()); err != nil {
			return err
		}
	}
	return nil
}

// createFiles creates each file at its final size; parts are written
// into place and all-zero parts are skipped, so holes stay holes.
func createFiles(dir string, entries []fileEntry) ([]*os.File, error) {
	var files []*os.File
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(e.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return files, err
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return files, err
		}
		files = append(files, f)
		if err := f.Truncate(e.Size); err != nil {
			return files, fmt.Errorf("size %s: %w", p, err)
		}
	}
	return files, nil
}

func (s *S3) getPart(ctx context.Context, p part, buf, zeros []byte) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(p.off, p.off+p.n-1); err != nil {
		return err
	}
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, p.name, opts)
	if err != nil {
		return fmt.Errorf("get s3://%s/%s: %w", s.cfg.Bucket, p.name, err)
	}
	defer obj.Close()
	if err := s.checkObjectSize(obj, p); err != nil {
		return err
	}
	b := buf[:p.n]
	if _, err := io.ReadFull(obj, b); err != nil {
		return fmt.Errorf("get s3://%s/%s bytes %d-%d: %w", s.cfg.Bucket, p.name, p.off, p.off+p.n-1, err)
	}
	if bytes.Equal(b, zeros[:p.n]) {
		return nil
	}
	if _, err := p.dst.WriteAt(b, p.at); err != nil {
		return fmt.Errorf("write %s at %d: %w", p.dst.Name(), p.at, err)
	}
	return nil
}

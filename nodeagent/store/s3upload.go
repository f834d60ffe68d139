package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// metaSHA256 is the user metadata (x-amz-meta-sha256) holding an
// object's sha256, re-read with StatObject to verify the upload.
const metaSHA256 = "sha256"

// upload is one key's background upload; st is owned by its goroutine
// (readers load the persisted copy).
type upload struct {
	s      *S3
	st     s3State
	cancel context.CancelFunc
	done   chan struct{}
}

// permanentError ends an upload at once: retrying cannot help.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func (s *S3) startUpload(st s3State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs[st.Key] != nil || s.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	u := &upload{s: s, st: st, cancel: cancel, done: make(chan struct{})}
	s.jobs[st.Key] = u
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(u.done)
		defer func() {
			s.mu.Lock()
			delete(s.jobs, st.Key)
			s.mu.Unlock()
		}()
		u.run(ctx)
	}()
}

func (s *S3) running(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[key] != nil
}

// stopUpload cancels key's upload, if any, and waits until it stopped
// touching the state file.
func (s *S3) stopUpload(key string) {
	s.mu.Lock()
	u := s.jobs[key]
	s.mu.Unlock()
	if u != nil {
		u.cancel()
		<-u.done
	}
}

// run retries attempts with exponential backoff until the key is Ready,
// the deadline passes (Failed), or the store stops it (the state stays
// resumable).
func (u *upload) run(ctx context.Context) {
	cfg := u.s.cfg
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
	defer cancel()
	u.save(RemoteInProgress, "uploading")
	var lastErr error
	for n := 1; ; n++ {
		if u.s.hooks.attempt != nil {
			u.s.hooks.attempt(u.st.Key, n)
		}
		err := u.attempt(dctx)
		if err == nil {
			u.ready(start)
			u.s.cached(ctx, u.st.Key) // no longer the only copy: evictable
			return
		}
		if ctx.Err() != nil {
			return // Close or Delete
		}
		// A request cut by the deadline says less than the failure before.
		if lastErr == nil || !errors.Is(err, context.DeadlineExceeded) {
			lastErr = err
		}
		if stop := u.giveUp(dctx, n, err); stop != "" {
			u.fail(stop, n, start, lastErr)
			return
		}
		wait := backoff(cfg.Backoff, cfg.MaxBackoff, n)
		cfg.Logf("store: upload %s: attempt %d failed: %v; retrying in %s", u.st.Key, n, err, wait)
		u.save(RemoteInProgress, fmt.Sprintf("attempt %d failed: %v; retrying in %s", n, err, wait))
		if !sleep(dctx, wait) {
			if ctx.Err() != nil {
				return
			}
			u.fail(fmt.Sprintf("deadline %s passed", cfg.Deadline), n, start, lastErr)
			return
		}
	}
}

// giveUp says why attempt n is the last, or "".
func (u *upload) giveUp(dctx context.Context, n int, err error) string {
	var perm permanentError
	switch {
	case errors.As(err, &perm):
		return "cannot be retried"
	case dctx.Err() != nil:
		return fmt.Sprintf("deadline %s passed", u.s.cfg.Deadline)
	case u.s.cfg.MaxRetries > 0 && n >= u.s.cfg.MaxRetries:
		return fmt.Sprintf("%d attempts made", n)
	}
	return ""
}

func backoff(first, max time.Duration, n int) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// attempt uploads what is not stored and verified yet, then the marker.
func (u *upload) attempt(ctx context.Context) error {
	for i := range u.st.Files {
		if !u.st.Files[i].Uploaded {
			if err := u.putFile(ctx, i); err != nil {
				return err
			}
		}
	}
	if err := u.objectSums(); err != nil {
		return err
	}
	return u.putMarker(ctx)
}

// objectSums fills in the objects' sha256 that the upload state of an
// older agent lacks for files it stored already (a download checks them).
func (u *upload) objectSums() error {
	for i := range u.st.Files {
		f := &u.st.Files[i]
		if f.Extents == nil || f.ObjectSHA256 != "" {
			continue
		}
		path := filepath.Join(u.s.Dir(u.st.Key), filepath.FromSlash(f.Path))
		sum, objSum, _, err := hashSparse(path, f.Extents)
		if err != nil {
			return permanentError{fmt.Errorf("local copy: %w", err)}
		}
		if sum != f.SHA256 {
			return permanentError{fmt.Errorf("%s changed after it was uploaded", path)}
		}
		f.ObjectSHA256 = objSum
		u.persist()
	}
	return nil
}

func (u *upload) putFile(ctx context.Context, i int) error {
	f := &u.st.Files[i]
	path := filepath.Join(u.s.Dir(u.st.Key), filepath.FromSlash(f.Path))
	// An upload state of an older agent may lack the object's sha256.
	if f.objectSum() == "" {
		if err := hashForUpload(path, &f.fileEntry); err != nil {
			return err
		}
		u.persist()
	}
	name := u.s.object(u.st.Key, f.Path)
	// An earlier run may have stored it and died before recording that.
	stored, err := u.s.matches(ctx, name, f.fileEntry)
	if err != nil {
		return err
	}
	if !stored {
		if err := u.put(ctx, name, path, f.fileEntry); err != nil {
			return err
		}
	}
	f.Uploaded = true
	u.persist()
	return nil
}

// hashForUpload records the file's data runs, its sha256 and its
// object's: the download checks the object, the manifest the file.
func hashForUpload(path string, f *fileEntry) error {
	ext, err := dataExtents(path, f.Size)
	if err != nil {
		return permanentError{fmt.Errorf("local copy: %w", err)}
	}
	runs := ext
	if runs == nil {
		runs = [][2]int64{{0, f.Size}}
	}
	sum, objSum, n, err := hashSparse(path, runs)
	if err != nil {
		return permanentError{fmt.Errorf("local copy: %w", err)}
	}
	if n != f.Size {
		return permanentError{fmt.Errorf("%s changed after commit (%d bytes, %d at commit)", path, n, f.Size)}
	}
	f.Extents, f.SHA256, f.ObjectSHA256 = ext, sum, ""
	if ext != nil {
		f.ObjectSHA256 = objSum
	}
	return nil
}

// put stores one file and verifies it. The server checks each part's
// CRC32C on receipt (minio-go's default checksum); the object's sha256 in
// the metadata is checked end to end when another node downloads.
func (u *upload) put(ctx context.Context, name, path string, f fileEntry) error {
	if u.s.hooks.beforePut != nil {
		u.s.hooks.beforePut(u.st.Key, name)
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", UserMetadata: map[string]string{metaSHA256: f.objectSum()}}
	file, err := os.Open(path)
	if err != nil {
		return permanentError{fmt.Errorf("local copy: %w", err)}
	}
	defer file.Close()
	readers := make([]io.Reader, 0, len(f.runs()))
	for _, r := range f.runs() { // the data runs back to back: holes are not stored
		readers = append(readers, io.NewSectionReader(file, r[0], r[1]))
	}
	if _, err := u.s.client.PutObject(ctx, u.s.cfg.Bucket, name, io.MultiReader(readers...), f.objectSize(), opts); err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", u.s.cfg.Bucket, name, err)
	}
	return u.verify(ctx, name, f)
}

func (u *upload) verify(ctx context.Context, name string, f fileEntry) error {
	ok, err := u.s.matches(ctx, name, f)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("verify s3://%s/%s: stored size or sha256 differs from the local file", u.s.cfg.Bucket, name)
	}
	return nil
}

// putMarker writes the completion marker, last: its presence is Ready.
// It is signed, and so is the manifest it lists (signMarker).
func (u *upload) putMarker(ctx context.Context) error {
	m := marker{Key: u.st.Key, Bytes: u.st.Bytes, ReadyTime: time.Now().UTC(), Node: u.s.cfg.Node}
	for _, f := range u.st.Files {
		m.Files = append(m.Files, f.fileEntry)
	}
	data, err := u.s.signMarker(m)
	if err != nil {
		return permanentError{err}
	}
	sum := sha256.Sum256(data)
	f := fileEntry{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	name := u.s.object(u.st.Key, markerName)
	if u.s.hooks.beforePut != nil {
		u.s.hooks.beforePut(u.st.Key, name)
	}
	opts := minio.PutObjectOptions{ContentType: "application/json", UserMetadata: map[string]string{metaSHA256: f.SHA256}}
	if _, err := u.s.client.PutObject(ctx, u.s.cfg.Bucket, name, bytes.NewReader(data), f.Size, opts); err != nil {
		return fmt.Errorf("put marker s3://%s/%s: %w", u.s.cfg.Bucket, name, err)
	}
	if err := u.verify(ctx, name, f); err != nil {
		return err
	}
	u.st.ReadyTime = m.ReadyTime
	return nil
}

// matches says whether object name holds f (size and sha256 metadata).
func (s *S3) matches(ctx context.Context, name string, f fileEntry) (bool, error) {
	info, err := s.client.StatObject(ctx, s.cfg.Bucket, name, minio.StatObjectOptions{})
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat s3://%s/%s: %w", s.cfg.Bucket, name, err)
	}
	return info.Size == f.objectSize() && metaValue(info.UserMetadata, metaSHA256) == f.objectSum(), nil
}

// metaValue looks up user metadata whatever the case the server used.
func metaValue(m map[string]string, name string) string {
	for k, v := range m {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

func (u *upload) ready(start time.Time) {
	el := time.Since(start)
	u.s.cfg.Logf("store: uploaded %s: %d bytes in %s (%.1f MB/s)", u.st.Key, u.st.Bytes, el.Round(time.Millisecond), float64(u.st.Bytes)/1e6/el.Seconds())
	u.save(RemoteReady, "")
}

func (u *upload) fail(why string, n int, start time.Time, err error) {
	msg := fmt.Sprintf("upload failed, %s (%d attempts in %s): %v; the data is kept on this node", why, n, time.Since(start).Round(time.Millisecond), err)
	u.s.cfg.Logf("store: upload %s: %s", u.st.Key, msg)
	u.save(RemoteFailed, msg)
}

func (u *upload) save(status RemoteState, msg string) {
	u.st.Remote, u.st.Message = status, msg
	u.persist()
}

// persist records progress; failing to (a full disk) only costs a resumed
// run some re-verification, so it is logged, not fatal.
func (u *upload) persist() {
	if err := writeJSON(u.s.statePath(u.st.Key), u.st); err != nil {
		u.s.cfg.Logf("store: upload %s: saving state: %v", u.st.Key, err)
	}
}

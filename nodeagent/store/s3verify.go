package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/sandlot-dev/sandlot/api/snapshot"
)

// manifestName is the snapshot's manifest: its exact bytes are signed on
// their own as well.
const manifestName = snapshot.ManifestFile

// signedMarker is the marker object: the marker's exact JSON and its
// signature (a JSON re-encoding could differ in bytes, so the signature
// covers the bytes stored).
type signedMarker struct {
	Marker    json.RawMessage `json:"marker"`
	Signature string          `json:"signature"`
}

// signMarker is the marker object's content for m, with the manifest's
// signature added to m and the whole signed.
func (s *S3) signMarker(m marker) ([]byte, error) {
	if i := slices.IndexFunc(m.Files, func(f fileEntry) bool { return f.Path == manifestName }); i >= 0 {
		b, err := os.ReadFile(filepath.Join(s.Dir(m.Key), manifestName))
		if err != nil {
			return nil, fmt.Errorf("sign the manifest: %w", err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != m.Files[i].SHA256 {
			return nil, fmt.Errorf("sign the manifest: %s changed after it was uploaded", manifestName)
		}
		m.ManifestSignature = s.cfg.Keys.sign(purposeManifest, m.Key, b)
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return json.Marshal(signedMarker{Marker: payload, Signature: s.cfg.Keys.sign(purposeMarker, m.Key, payload)})
}

// openMarker verifies a marker object's signature for key and parses it.
func (s *S3) openMarker(key string, data []byte) (marker, error) {
	var m marker
	var env signedMarker
	if err := json.Unmarshal(data, &env); err != nil {
		return m, fmt.Errorf("%w: completion marker of %s: %v", ErrIntegrity, key, err)
	}
	if env.Signature == "" {
		return m, fmt.Errorf("%w: the completion marker of %s is not signed (written before markers were signed, or forged)", ErrIntegrity, key)
	}
	if err := s.cfg.Keys.verify(purposeMarker, key, env.Marker, env.Signature); err != nil {
		return m, err
	}
	if err := json.Unmarshal(env.Marker, &m); err != nil {
		return m, fmt.Errorf("%w: completion marker of %s: %v", ErrIntegrity, key, err)
	}
	return m, checkMarker(key, m)
}

// checkManifest verifies the downloaded manifest's own signature.
func (s *S3) checkManifest(key string, m marker, dir string) error {
	if !slices.ContainsFunc(m.Files, func(f fileEntry) bool { return f.Path == manifestName }) {
		return nil // a key that is not a snapshot (a base disk)
	}
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return err
	}
	return s.cfg.Keys.verify(purposeManifest, key, b, m.ManifestSignature)
}

// checkObjectSize compares the object's size, as its ranged GET reports
// it, with the signed one: a changed length is no network error to retry.
func (s *S3) checkObjectSize(obj *minio.Object, p part) error {
	info, err := obj.Stat() // the GET's own response: no request more
	if minio.ToErrorResponse(err).Code == "InvalidRange" {
		return fmt.Errorf("%w: s3://%s/%s is shorter than the %d bytes its signed marker says", ErrIntegrity, s.cfg.Bucket, p.name, p.objSize)
	}
	if err != nil {
		return fmt.Errorf("get s3://%s/%s: %w", s.cfg.Bucket, p.name, err)
	}
	_, total, ok := strings.Cut(info.Headers.Get("Content-Range"), "/")
	if n, err := strconv.ParseInt(total, 10, 64); ok && err == nil && n != p.objSize {
		return fmt.Errorf("%w: s3://%s/%s holds %d bytes, its signed marker says %d", ErrIntegrity, s.cfg.Bucket, p.name, n, p.objSize)
	}
	return nil
}

// streamHasher checks a download's objects against the signed sha256s
// as the parts land, with no second pass over the files. Parts arrive in
// any order from the parallel GETs and sha256 is sequential, so each
// written part waits in pending until those before it were hashed. A
// sparse file's object holds its data runs only (the signed Extents say
// where they go; the holes are zeros by construction), so what is checked
// is what was received. The buffers a part holds go back to free once it
// is hashed: the GETs run at most len(free) parts ahead of the hash.
type streamHasher struct {
	key     string
	parts   []part
	files   []fileEntry
	h       hash.Hash
	file    int   // the file being hashed
	n       int64 // its object's bytes hashed
	next    int   // the next part to hash
	pending map[int][]byte
	free    chan []byte
	off     bool // hooks.skipVerify: measure the download alone
}

func newStreamHasher(key string, parts []part, files []fileEntry, window int, partSize int64) *streamHasher {
	h := &streamHasher{key: key, parts: parts, files: files, h: sha256.New(), pending: map[int][]byte{},
		free: make(chan []byte, window)}
	for range window {
		h.free <- make([]byte, partSize)
	}
	return h
}

// add takes part seq's data and hashes every part now in order.
func (h *streamHasher) add(seq int, buf []byte) error {
	h.pending[seq] = buf
	for {
		b, ok := h.pending[h.next]
		if !ok {
			return nil
		}
		delete(h.pending, h.next)
		err := h.hashPart(h.parts[h.next], b)
		h.free <- b
		h.next++
		if err != nil {
			return err
		}
	}
}

func (h *streamHasher) hashPart(p part, b []byte) error {
	for h.file < p.file {
		if err := h.finishFile(); err != nil {
			return err
		}
	}
	if !h.off {
		h.h.Write(b[:p.n])
	}
	h.n += p.n
	return nil
}

// finishFile compares the file's object with its signed sha256.
func (h *streamHasher) finishFile() error {
	f := h.files[h.file]
	sum := hex.EncodeToString(h.h.Sum(nil))
	n := h.n
	h.h.Reset()
	h.file, h.n = h.file+1, 0
	if !h.off && sum != f.objectSum() {
		return fmt.Errorf("%w: %s of %s: received %d bytes with sha256 %s, signed for %d bytes with sha256 %s",
			ErrIntegrity, f.Path, h.key, n, sum, f.objectSize(), f.objectSum())
	}
	return nil
}

// finish checks the files after the last part (and those with no part:
// empty, or holes only).
func (h *streamHasher) finish() error {
	for h.file < len(h.files) {
		if err := h.finishFile(); err != nil {
			return err
		}
	}
	return nil
}

// fetchedPart is part seq of a download and the buffer it is read into.
type fetchedPart struct {
	seq int
	buf []byte
}

// getParts runs the GETs, Parallel at a time, and hashes what they wrote;
// the first error (a GET, a write, a sha256 that differs) stops the rest.
func (s *S3) getParts(ctx context.Context, key string, parts []part, files []fileEntry) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Twice the GETs in flight: one slow part does not stall the others
	// at once. 2 x Parallel x PartSize of memory (64 MiB by default).
	window := 2 * s.cfg.Parallel
	h := newStreamHasher(key, parts, files, window, s.cfg.PartSize)
	h.off = s.hooks.skipVerify
	todo := make(chan fetchedPart)
	got := make(chan fetchedPart, window) // never blocks: each holds one of the window's buffers
	go feedParts(ctx, len(parts), h.free, todo)
	var wg sync.WaitGroup
	zeros := make([]byte, s.cfg.PartSize)
	for range s.cfg.Parallel {
		wg.Go(func() {
			for p := range todo {
				if err := s.getPart(ctx, parts[p.seq], p.buf, zeros); err != nil {
					cancel(err)
					continue
				}
				got <- p
			}
		})
	}
	go func() { wg.Wait(); close(got) }()
	for p := range got {
		if ctx.Err() == nil {
			if err := h.add(p.seq, p.buf); err != nil {
				cancel(err)
			}
		}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return h.finish()
}

// feedParts hands out the parts in order, each with a free buffer: the
// GETs wait for the hash once every buffer is taken.
func feedParts(ctx context.Context, n int, free <-chan []byte, todo chan<- fetchedPart) {
	defer close(todo)
	for i := range n {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return
		}
		select {
		case todo <- fetchedPart{seq: i, buf: buf}:
		case <-ctx.Done():
			return
		}
	}
}

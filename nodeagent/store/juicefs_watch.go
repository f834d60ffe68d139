package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// jfsPending is a key this node committed and watches until its blocks
// have left the client's staging area.
type jfsPending struct {
	since  time.Time // the Commit: the deadline counts from it
	blocks int       // its blocks staged at the last check; -1 before one
	bytes  int64
	err    error // the last check's, if it could not tell
	// left are the staging paths of its blocks not seen gone yet, listed
	// once (the files do not change after Commit, and a block that left
	// staging never comes back): later checks only stat them.
	left   []string
	listed bool
}

// check looks at each waiting key's blocks: none staged → Ready, past
// the deadline → Failed. Each key stands alone, so a sandbox writing all
// the time on this node does not hold back another's snapshot.
func (j *JuiceFS) check() {
	j.mu.Lock()
	keys := make([]string, 0, len(j.pending))
	for k := range j.pending {
		keys = append(keys, k)
	}
	j.mu.Unlock()
	for _, k := range keys {
		if j.ctx.Err() != nil {
			return // closing
		}
		j.checkKey(k)
	}
}

func (j *JuiceFS) checkKey(k string) {
	j.mu.Lock()
	p := j.pending[k]
	if p == nil { // deleted meanwhile
		j.mu.Unlock()
		return
	}
	left, listed := p.left, p.listed
	j.mu.Unlock()
	left, bytes, err := j.keyStaged(j.ctx, k, left, listed)
	j.mu.Lock()
	if j.pending[k] != p { // deleted or committed again meanwhile
		j.mu.Unlock()
		return
	}
	repeated := err != nil && p.err != nil && err.Error() == p.err.Error()
	if err == nil {
		p.left, p.listed, p.blocks, p.bytes = left, true, len(left), bytes
	}
	p.err = err
	blocks, late := p.blocks, time.Since(p.since) > j.cfg.UploadDeadline
	j.mu.Unlock()
	switch {
	case err == nil && blocks == 0:
		j.mark(k, j.readyPath(k), "")
	case late:
		j.mark(k, j.failedPath(k), j.lateMessage(blocks, bytes, err))
	case err != nil && !repeated: // once per distinct error, not every poll
		j.cfg.Logf("store: juicefs: %s: %v", k, err)
	}
}

// keyStaged returns which of key's blocks are still in this node's
// staging area (left, once listed; else from its files' objects) and
// their bytes.
func (j *JuiceFS) keyStaged(ctx context.Context, key string, left []string, listed bool) ([]string, int64, error) {
	if _, err := os.Stat(filepath.Dir(j.cfg.StagingDir)); err != nil {
		return nil, 0, fmt.Errorf("juicefs staging dir %s: %w (want <cache-dir>/<UUID>/rawstaging of this mount)", j.cfg.StagingDir, err)
	}
	if !listed {
		var err error
		if left, err = j.stagingPaths(ctx, key); err != nil {
			return nil, 0, err
		}
	}
	var still []string
	var bytes int64
	for _, p := range left {
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("juicefs staging: %w", err)
		}
		still, bytes = append(still, p), bytes+fi.Size()
	}
	return still, bytes, nil
}

// stagingPaths lists where each block of key's files would wait in
// staging, from the objects the client lists for them.
func (j *JuiceFS) stagingPaths(ctx context.Context, key string) ([]string, error) {
	dir := j.Dir(key)
	files, err := scanDir(dir)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var paths []string
	for _, f := range files {
		objs, err := j.cfg.Objects(ctx, filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if p := filepath.Join(j.cfg.StagingDir, stagingName(o.Key)); o.Key != "" && !seen[p] { // "": a hole
				seen[p] = true
				paths = append(paths, p)
			}
		}
	}
	return paths, nil
}

// stagingName is where an object waits in staging: its key without the
// volume name ("<volume>/chunks/0/0/1_0_4194304" → "chunks/0/0/1_0_4194304").
func stagingName(object string) string {
	_, rest, _ := strings.Cut(object, "/")
	return filepath.FromSlash(rest)
}

// lateMessage says why a key is Failed: what is still staged and, with
// the client's metrics, how its object requests fare.
func (j *JuiceFS) lateMessage(blocks int, bytes int64, err error) string {
	msg := fmt.Sprintf("%d blocks (%d bytes) of its files still in this node's JuiceFS writeback staging after %s", blocks, bytes, j.cfg.UploadDeadline)
	if err != nil {
		msg = fmt.Sprintf("could not tell for %s whether its data left this node: %v", j.cfg.UploadDeadline, err)
	}
	if j.cfg.MetricsURL != "" {
		if n, err := j.scrape(j.ctx, metricObjectErrors); err == nil {
			msg += fmt.Sprintf(" (the client's object requests failed %.0f times; its log says why)", n)
		}
	}
	return msg + "; the client keeps the blocks and retries, a new commit waits again"
}

// mark ends a key's watch with a marker (ready or failed).
func (j *JuiceFS) mark(key, marker, why string) {
	unlock := j.locks.lock(key)
	defer unlock()
	j.mu.Lock()
	_, waiting := j.pending[key]
	j.mu.Unlock()
	if !waiting { // deleted meanwhile
		return
	}
	if err := touch(marker); err != nil {
		j.cfg.Logf("store: juicefs: marking %s: %v", key, err)
		return
	}
	j.mu.Lock()
	delete(j.pending, key)
	if why != "" {
		j.failed[key] = why
	}
	j.mu.Unlock()
	if why != "" {
		j.cfg.Logf("store: juicefs: %s failed: %s", key, why)
		return
	}
	j.cfg.Logf("store: juicefs: %s ready", key)
}

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
		blocks, bytes, err := j.keyStaged(j.ctx, k)
		j.mu.Lock()
		p := j.pending[k]
		if p == nil { // deleted meanwhile
			j.mu.Unlock()
			continue
		}
		repeated := err != nil && p.err != nil && err.Error() == p.err.Error()
		p.blocks, p.bytes, p.err = blocks, bytes, err
		late := time.Since(p.since) > j.cfg.UploadDeadline
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
}

// keyStaged counts the blocks of key's files still in this node's
// staging area, and their bytes.
func (j *JuiceFS) keyStaged(ctx context.Context, key string) (blocks int, bytes int64, err error) {
	if _, err := os.Stat(filepath.Dir(j.cfg.StagingDir)); err != nil {
		return 0, 0, fmt.Errorf("juicefs staging dir %s: %w (want <cache-dir>/<UUID>/rawstaging of this mount)", j.cfg.StagingDir, err)
	}
	dir := j.Dir(key)
	files, err := scanDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, f := range files {
		objs, err := j.cfg.Objects(ctx, filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return 0, 0, err
		}
		for _, o := range objs {
			if o.Key == "" {
				continue // a hole
			}
			fi, err := os.Lstat(filepath.Join(j.cfg.StagingDir, stagingName(o.Key)))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, 0, fmt.Errorf("juicefs staging: %w", err)
			}
			blocks, bytes = blocks+1, bytes+fi.Size()
		}
	}
	return blocks, bytes, nil
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
		msg = fmt.Sprintf("could not tell for %s which of its blocks are staged: %v", j.cfg.UploadDeadline, err)
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

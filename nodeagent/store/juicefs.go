package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// JuiceFSConfig configures the juicefs backend.
//
// The JuiceFS client must be mounted with --writeback: a write (and its
// fsync) returns once the block is in the client's local staging area and
// the upload to object storage happens later
// (https://juicefs.com/docs/community/cache/#client-write-cache). Another
// node sees the files at once (metadata is synchronous) but cannot read
// blocks still staged on the writer, so a key is Ready only once none of
// the objects holding its files' data is still in the writer's staging
// area (the objects from the client's control file, as `juicefs info`
// lists them; the staging area is one file per block, named like its
// object).
type JuiceFSConfig struct {
	// MountDir is the JuiceFS CSI mount, the same volume on every node.
	MountDir string
	// StagingDir is the client's staging directory,
	// <cache-dir>/<UUID>/rawstaging/ (one file per staged block,
	// https://juicefs.com/docs/community/cache/#client-write-cache).
	StagingDir string
	// MetricsURL, optional, is the client's Prometheus endpoint
	// (https://juicefs.com/docs/community/p8s_metrics/): a key whose
	// blocks stay staged says how many object requests failed.
	MetricsURL string
	// UploadDeadline bounds the wait for a key's blocks to leave staging,
	// from its Commit: then it is Failed (the client keeps its blocks and
	// keeps trying; a new Commit waits again). Default 1 h.
	UploadDeadline time.Duration
	// Node names this node: a key is Ready when the client of the node
	// that committed it has uploaded its blocks (default hostname).
	Node string
	// PollInterval is how often staging is checked while keys wait
	// (default 100 ms: after a key's first check, a check stats the
	// staging paths of its blocks not gone yet, nothing more).
	PollInterval time.Duration
	// Logf receives progress messages (default: none).
	Logf func(format string, args ...any)
	// Keys sign the records of the keys this node commits and verify
	// those Open hands out (juicefs_sign.go). Required: without them a
	// writer of the volume picks what this node restores.
	Keys *Keys
	// Objects lists the objects holding a file's data; default: the
	// client's control file (JuiceFSObjects).
	Objects func(ctx context.Context, path string) ([]JuiceFSObject, error)
	// VerifyContent makes Open hash every file against its signed sha256
	// on each node's first Open, as well as check its objects: the
	// defence against a writer of the bucket itself (who can change an
	// object's bytes) when the volume is not encrypted. Off: only the
	// signed object layout is checked (no data read up front).
	VerifyContent bool
}

// jfsMeta is the store's directory on the mount. Its markers are empty
// files and directories: metadata only, visible to every node at once,
// with no data block of their own to wait for.
const jfsMeta = ".sandlot-store"

// JuiceFS keeps snapshots on a JuiceFS mount shared by all nodes.
type JuiceFS struct {
	cfg   JuiceFSConfig
	meta  string
	http  *http.Client
	locks keyLocks
	pins  pins

	mu       sync.Mutex
	pending  map[string]*jfsPending // committed here, not Ready yet
	failed   map[string]string      // key → why it failed (this node's)
	verified map[string]string      // key → fingerprint of the files last hashed

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ Store = (*JuiceFS)(nil)

// NewJuiceFS opens a juicefs store and starts watching staging; call
// Resume to pick up keys committed before a restart.
func NewJuiceFS(cfg JuiceFSConfig) (*JuiceFS, error) {
	if !filepath.IsAbs(cfg.MountDir) {
		return nil, fmt.Errorf("store: juicefs: MountDir %q is not absolute", cfg.MountDir)
	}
	if !filepath.IsAbs(cfg.StagingDir) {
		return nil, fmt.Errorf("store: juicefs: StagingDir %q is not absolute: the client's <cache-dir>/<UUID>/rawstaging tells when data has left this node", cfg.StagingDir)
	}
	if cfg.Keys == nil {
		return nil, errors.New("store: juicefs: Keys are required: the nodes sign what they commit and verify what they restore")
	}
	setDefault(&cfg.PollInterval, 100*time.Millisecond)
	setDefault(&cfg.UploadDeadline, time.Hour)
	if cfg.Objects == nil {
		cfg.Objects = JuiceFSObjects
	}
	if cfg.Node == "" {
		cfg.Node, _ = os.Hostname()
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	j := &JuiceFS{cfg: cfg, meta: filepath.Join(filepath.Clean(cfg.MountDir), jfsMeta), http: &http.Client{Timeout: 5 * time.Second},
		pending: map[string]*jfsPending{}, failed: map[string]string{}, verified: map[string]string{}, kick: make(chan struct{}, 1)}
	for _, d := range []string{"commit", "ready", "failed", jfsSigned} {
		if err := os.MkdirAll(filepath.Join(j.meta, d), 0o700); err != nil {
			return nil, fmt.Errorf("store: juicefs: %w", err)
		}
	}
	j.ctx, j.cancel = context.WithCancel(context.Background())
	j.wg.Add(1)
	go j.poll()
	return j, nil
}

// Close stops watching staging; pending keys resume with Resume.
func (j *JuiceFS) Close() error {
	j.cancel()
	j.wg.Wait()
	return nil
}

// Dir implements Store.
func (j *JuiceFS) Dir(key string) string { return keyDir(filepath.Clean(j.cfg.MountDir), key) }

func (j *JuiceFS) commitDir(key string) string {
	return filepath.Join(j.meta, "commit", escapeKey(key))
}
func (j *JuiceFS) readyPath(key string) string { return filepath.Join(j.meta, "ready", escapeKey(key)) }
func (j *JuiceFS) failedPath(key string) string {
	return filepath.Join(j.meta, "failed", escapeKey(key))
}
func (j *JuiceFS) ownCommit(key string) string { return filepath.Join(j.commitDir(key), j.cfg.Node) }

// Commit implements Store: it signs key's files (their sizes, layouts and
// the sha256 this node computed writing them; other files are hashed),
// marks key committed by this node and queues it for the staging watch.
func (j *JuiceFS) Commit(ctx context.Context, key string) (Info, error) {
	if err := checkKey(key); err != nil {
		return Info{}, err
	}
	unlock := j.locks.lock(key)
	defer unlock()
	rec, err := commitRecord(key, j.Dir(key))
	if err != nil {
		return Info{}, err
	}
	if ok, _ := exists(j.readyPath(key)); ok {
		return Info{Key: key, Bytes: rec.Bytes, Remote: RemoteReady}, nil
	}
	if err := j.sign(key, rec.Files); err != nil {
		return Info{}, fmt.Errorf("store: commit %s: sign: %w", key, err)
	}
	// A new run: the deadline counts from now, a failure is forgotten.
	if err := touchNow(j.ownCommit(key)); err != nil {
		return Info{}, fmt.Errorf("store: commit %s: %w", key, err)
	}
	if err := removeAll(j.failedPath(key)); err != nil {
		return Info{}, fmt.Errorf("store: commit %s: %w", key, err)
	}
	j.watch(key, time.Now())
	return Info{Key: key, Bytes: rec.Bytes, Remote: RemoteInProgress}, nil
}

// touch creates an empty file durably.
func touch(p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(filepath.Dir(p))
}

// touchNow creates an empty file durably, or sets its times to now.
func touchNow(p string) error {
	if err := touch(p); err != nil {
		return err
	}
	now := time.Now()
	return os.Chtimes(p, now, now)
}

// watch waits for key's blocks to leave staging.
func (j *JuiceFS) watch(key string, since time.Time) {
	j.mu.Lock()
	j.pending[key] = &jfsPending{since: since, blocks: -1}
	delete(j.failed, key)
	j.mu.Unlock()
	j.kickCheck()
}

func (j *JuiceFS) kickCheck() {
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// committers lists the nodes that committed key.
func (j *JuiceFS) committers(key string) ([]string, error) {
	ents, err := os.ReadDir(j.commitDir(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var nodes []string
	for _, e := range ents {
		nodes = append(nodes, e.Name())
	}
	sort.Strings(nodes)
	return nodes, err
}

// Resume watches again the keys this node committed that are not Ready.
func (j *JuiceFS) Resume(ctx context.Context) error {
	ents, err := os.ReadDir(filepath.Join(j.meta, "commit"))
	if err != nil {
		return fmt.Errorf("store: resume: %w", err)
	}
	for _, e := range ents {
		key, err := unescapeKey(e.Name())
		if err != nil || checkKey(key) != nil {
			continue
		}
		fi, err := os.Stat(j.ownCommit(key))
		ready, _ := exists(j.readyPath(key))
		failed, _ := exists(j.failedPath(key))
		if err == nil && !ready && !failed {
			j.watch(key, fi.ModTime()) // the deadline counts from the Commit
		}
	}
	return nil
}

// poll checks staging on every tick or new commit while keys wait.
func (j *JuiceFS) poll() {
	defer j.wg.Done()
	t := time.NewTicker(j.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-j.ctx.Done():
			return
		case <-t.C:
		case <-j.kick:
		}
		j.check()
	}
}

// Open implements Store: the data is read in place on the mount, once
// Ready (or on the node that wrote it, whose client has every block),
// and only once it matches its signed record.
func (j *JuiceFS) Open(ctx context.Context, key string) (string, func(), error) {
	if err := checkKey(key); err != nil {
		return "", nil, err
	}
	unlock := j.locks.lock(key)
	defer unlock()
	st, err := j.status(key)
	if err != nil {
		return "", nil, fmt.Errorf("store: open %s: %w", key, err)
	}
	if st.Remote != RemoteReady && !st.own {
		return "", nil, fmt.Errorf("store: open %s: %w: %s", key, ErrNotReady, st.Message)
	}
	if err := j.verify(key); err != nil {
		return "", nil, fmt.Errorf("store: open %s: %w", key, err)
	}
	return j.Dir(key), j.pins.pin(key), nil
}

// Status implements Store.
func (j *JuiceFS) Status(ctx context.Context, key string) (Status, error) {
	if err := checkKey(key); err != nil {
		return Status{}, err
	}
	st, err := j.status(key)
	if err != nil {
		return Status{}, fmt.Errorf("store: status %s: %w", key, err)
	}
	return st.Status, nil
}

type jfsStatus struct {
	Status
	own bool // committed by this node
}

func (j *JuiceFS) status(key string) (jfsStatus, error) {
	nodes, err := j.committers(key)
	if err != nil {
		return jfsStatus{}, err
	}
	if len(nodes) == 0 {
		if ok, err := exists(j.Dir(key)); err != nil || !ok {
			return jfsStatus{}, cmpErr(err, ErrNotFound)
		}
		return jfsStatus{}, fmt.Errorf("%w (%s was written but never committed)", ErrNotCommitted, j.Dir(key))
	}
	files, err := scanDir(j.Dir(key))
	if err != nil {
		return jfsStatus{}, fmt.Errorf("committed but unreadable: %w", err)
	}
	st := jfsStatus{Status: Status{Bytes: sumSizes(files)}, own: contains(nodes, j.cfg.Node)}
	if fi, err := os.Stat(j.readyPath(key)); err == nil {
		st.Remote, st.ReadyTime = RemoteReady, fi.ModTime().UTC()
		return st, nil
	}
	if ok, _ := exists(j.failedPath(key)); ok {
		st.Remote, st.Message = RemoteFailed, j.failMessage(key, nodes)
		return st, nil
	}
	st.Remote = RemoteInProgress
	st.Message = j.waitMessage(key, nodes, st.own)
	return st, nil
}

func (j *JuiceFS) waitMessage(key string, nodes []string, own bool) string {
	if !own {
		return fmt.Sprintf("waiting for the JuiceFS client of node %v to upload its staged blocks", nodes)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	p := j.pending[key]
	switch {
	case p == nil:
		return "waiting for this node's JuiceFS client to upload its staged blocks (not watched: the agent restarts)"
	case p.err != nil:
		return fmt.Sprintf("waiting for this node's JuiceFS client to upload its staged blocks (cannot tell which are staged: %v)", p.err)
	case p.blocks < 0:
		return "waiting for this node's JuiceFS client to upload its staged blocks (not checked yet)"
	}
	return fmt.Sprintf("%d blocks (%d bytes) of its files still in this node's JuiceFS writeback staging", p.blocks, p.bytes)
}

func (j *JuiceFS) failMessage(key string, nodes []string) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if m := j.failed[key]; m != "" {
		return m
	}
	return fmt.Sprintf("the JuiceFS client of node %v did not upload its staged blocks within %s", nodes, j.cfg.UploadDeadline)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// cmpErr is err, or def when err is nil.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// Delete implements Store: markers first, so no node sees the key Ready
// while its files disappear.
func (j *JuiceFS) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	unlock := j.locks.lock(key)
	defer unlock()
	if j.pins.pinned(key) {
		return inUse(key)
	}
	j.mu.Lock()
	delete(j.pending, key)
	delete(j.failed, key)
	j.mu.Unlock()
	j.forget(key)
	found := false
	for _, p := range []string{j.readyPath(key), j.failedPath(key), j.commitDir(key), j.signedPath(key), j.Dir(key)} {
		ok, err := exists(p)
		if err == nil && ok {
			found = true
			err = removeAll(p)
		}
		if err != nil {
			return fmt.Errorf("store: delete %s: %w", key, err)
		}
	}
	if !found {
		return fmt.Errorf("store: delete %s: %w", key, ErrNotFound)
	}
	return nil
}

// Usage implements Store: LocalBytes is what this node has staged and
// not uploaded yet; RemoteBytes sums the committed keys' files.
func (j *JuiceFS) Usage(ctx context.Context) (Usage, error) {
	ents, err := os.ReadDir(filepath.Join(j.meta, "commit"))
	if err != nil {
		return Usage{}, fmt.Errorf("store: usage: %w", err)
	}
	var u Usage
	for _, e := range ents {
		key, err := unescapeKey(e.Name())
		if err != nil || checkKey(key) != nil {
			continue
		}
		u.Keys++
		if files, err := scanDir(j.Dir(key)); err == nil {
			u.RemoteBytes += sumSizes(files)
		}
	}
	u.LocalBytes, err = j.stagedBytes()
	if err != nil {
		return u, fmt.Errorf("store: usage: %w", err)
	}
	return u, nil
}

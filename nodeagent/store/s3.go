package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config configures the s3 backend.
type S3Config struct {
	// Endpoint is host:port, or a URL whose scheme (http, https) decides
	// TLS.
	Endpoint string
	Bucket   string
	// Prefix is prepended to every object name ("" for the bucket root).
	Prefix    string
	AccessKey string
	SecretKey string
	// Region avoids a bucket-location lookup; "" asks the server.
	Region string
	// Insecure talks plain HTTP to a host:port Endpoint.
	Insecure bool
	// CacheRoot holds this node's copy of every key it wrote or opened
	// (CacheRoot/<key>) and the upload state. Give it the same path on
	// every node: snapshot manifests refer to files by absolute path.
	CacheRoot string
	// CacheMaxBytes caps the local copies whose remote copy is complete;
	// the least recently used unopened ones are evicted (s3cache.go). 0:
	// CacheMaxDiskPercent of CacheRoot's filesystem, or unbounded if that
	// is 0 too.
	CacheMaxBytes       int64
	CacheMaxDiskPercent int

	// MaxRetries bounds the upload attempts of a key (0: retry until
	// Deadline).
	MaxRetries int
	// Backoff is the wait after the first failed attempt, doubled after
	// each further one up to MaxBackoff (defaults 1 s and 1 min).
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Deadline bounds one upload run (from Commit or Resume) before the
	// key is Failed (default 1 h). Nothing is deleted locally then.
	Deadline time.Duration
	// RequestRetries is the S3 client's own fast retries of one request
	// (default 3); the backoff above covers longer outages.
	RequestRetries int

	// PartSize and Parallel shape downloads: ranged GETs of PartSize
	// bytes, Parallel at a time (defaults 8 MiB, 4).
	PartSize int64
	Parallel int

	// Keys sign the completion markers and manifests this node uploads
	// and verify those it downloads (keys.go). Required: without them a
	// writer of the bucket picks what this node restores.
	Keys *Keys

	// Node names this node in the completion marker (default hostname).
	Node string
	// Logf receives progress and retry messages (default: none).
	Logf func(format string, args ...any)
}

func (c *S3Config) defaults() error {
	if c.Endpoint == "" || c.Bucket == "" || c.CacheRoot == "" {
		return errors.New("store: s3: Endpoint, Bucket and CacheRoot are required")
	}
	if c.Keys == nil {
		return errors.New("store: s3: Keys are required: the nodes sign what they upload and verify what they download")
	}
	if !filepath.IsAbs(c.CacheRoot) {
		return fmt.Errorf("store: s3: CacheRoot %q is not absolute", c.CacheRoot)
	}
	if c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	setDefault(&c.Backoff, time.Second)
	setDefault(&c.MaxBackoff, time.Minute)
	setDefault(&c.Deadline, time.Hour)
	setDefault(&c.RequestRetries, 3)
	setDefault(&c.PartSize, 8<<20)
	setDefault(&c.Parallel, 4)
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// S3 keeps snapshots locally and uploads them to an S3-compatible store
// in the background; other nodes download them on Open.
type S3 struct {
	cfg    S3Config
	client *minio.Client
	root   string
	locks  keyLocks
	pins   pins
	cache  cacheIndex
	// held says whether something on this node still restores from a
	// key (HoldWhile); such a key is never evicted.
	held atomic.Pointer[func(key string) bool]

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	mu     sync.Mutex
	jobs   map[string]*upload
	wg     sync.WaitGroup

	// hooks let tests crash or fault an upload at a precise point.
	hooks s3Hooks
}

type s3Hooks struct {
	beforePut  func(key, object string) // before each object's PUT
	attempt    func(key string, n int)  // before each upload attempt
	skipVerify bool                     // download without hashing: its cost, measured
}

var _ Store = (*S3)(nil)

// Origins of a key's local copy.
const (
	originLocal  = "local"  // committed on this node
	originRemote = "remote" // downloaded from the remote
)

// s3State is what this node knows of a key, persisted per key so a
// restarted process resumes unfinished uploads.
type s3State struct {
	Key        string      `json:"key"`
	Origin     string      `json:"origin"`
	Remote     RemoteState `json:"remote"`
	Message    string      `json:"message,omitempty"`
	Files      []upFile    `json:"files"`
	Bytes      int64       `json:"bytes"`
	CommitTime time.Time   `json:"commitTime"`
	ReadyTime  time.Time   `json:"readyTime,omitzero"`
}

type upFile struct {
	fileEntry
	Uploaded bool `json:"uploaded,omitempty"` // stored and verified
}

// marker is the completion marker object, written after every object
// was stored and verified: its presence is what Ready means.
type marker struct {
	Key       string      `json:"key"`
	Files     []fileEntry `json:"files"`
	Bytes     int64       `json:"bytes"`
	ReadyTime time.Time   `json:"readyTime"`
	Node      string      `json:"node,omitempty"`
	// ManifestSignature signs manifest.json's exact bytes (keys.go).
	ManifestSignature string `json:"manifestSignature,omitempty"`
}

const markerName = ".complete"

// NewS3 opens an s3 store. It does not contact the remote (the agent must
// start while it is down) and does not resume uploads: call Resume.
func NewS3(cfg S3Config) (*S3, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	client, err := newS3Client(cfg)
	if err != nil {
		return nil, err
	}
	// Partial downloads of a previous process are garbage: a download
	// only counts once renamed into place.
	if err := removeAll(filepath.Join(cfg.CacheRoot, metaDir, "tmp")); err != nil {
		return nil, fmt.Errorf("store: s3 cache: %w", err)
	}
	for _, d := range []string{"state", "tmp"} {
		if err := os.MkdirAll(filepath.Join(cfg.CacheRoot, metaDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("store: s3 cache: %w", err)
		}
	}
	if err := cfg.cacheCap(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &S3{cfg: cfg, client: client, root: filepath.Clean(cfg.CacheRoot), ctx: ctx, cancel: cancel, jobs: map[string]*upload{}}
	if err := s.loadCache(); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

func newS3Client(cfg S3Config) (*minio.Client, error) {
	host, secure := cfg.Endpoint, !cfg.Insecure
	if h, ok := strings.CutPrefix(host, "http://"); ok {
		host, secure = h, false
	} else if h, ok := strings.CutPrefix(host, "https://"); ok {
		host, secure = h, true
	}
	client, err := minio.New(strings.TrimSuffix(host, "/"), &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     secure,
		Region:     cfg.Region,
		MaxRetries: cfg.RequestRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("store: s3 client for %s: %w", cfg.Endpoint, err)
	}
	return client, nil
}

// Close stops the uploads in flight, leaving them resumable, and waits.
func (s *S3) Close() error {
	s.mu.Lock() // startUpload adds to wg under mu: no Add after this Wait
	s.cancel()
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Dir implements Store: CacheRoot/<key>, on the node that wrote the key
// and on the nodes that downloaded it alike.
func (s *S3) Dir(key string) string { return keyDir(s.root, key) }

func (s *S3) statePath(key string) string {
	return filepath.Join(s.root, metaDir, "state", escapeKey(key)+".json")
}

func (s *S3) object(key, rel string) string { return s.cfg.Prefix + key + "/" + rel }

// loadState reads key's state; ok is false when this node has none.
func (s *S3) loadState(key string) (st s3State, ok bool, err error) {
	err = readJSON(s.statePath(key), &st)
	if errors.Is(err, fs.ErrNotExist) {
		return st, false, nil
	}
	return st, err == nil, err
}

// Commit implements Store: it records the files and queues the upload.
// Hashing happens in the upload, so Commit does not read the data.
func (s *S3) Commit(ctx context.Context, key string) (Info, error) {
	if err := checkKey(key); err != nil {
		return Info{}, err
	}
	unlock := s.locks.lock(key)
	defer unlock()
	if st, ok, err := s.loadState(key); err != nil {
		return Info{}, fmt.Errorf("store: commit %s: %w", key, err)
	} else if ok && (st.Remote == RemoteReady || s.running(key)) {
		return Info{Key: key, Bytes: st.Bytes, Remote: st.Remote}, nil // committed already
	}
	rec, err := commitRecord(key, s.Dir(key))
	if err != nil {
		return Info{}, err
	}
	for _, f := range rec.Files {
		if f.Path == markerName { // its object would pose as the marker
			return Info{}, fmt.Errorf("store: commit %s: a snapshot file may not be named %s", key, markerName)
		}
	}
	st := s3State{Key: key, Origin: originLocal, Remote: RemotePending, Bytes: rec.Bytes, CommitTime: rec.CommitTime}
	// The sums the VM layer computed as it wrote the files (a sparse
	// layer's data extents): the upload hashes only what it lacks.
	known := knownSums(s.Dir(key))
	for _, f := range rec.Files {
		if k, ok := known[f.Path]; ok && k.Size == f.Size {
			f.SHA256, f.Extents, f.ObjectSHA256 = k.SHA256, k.Extents, k.ObjectSHA256
		}
		st.Files = append(st.Files, upFile{fileEntry: f})
	}
	if err := writeJSON(s.statePath(key), st); err != nil {
		return Info{}, fmt.Errorf("store: commit %s: upload state: %w", key, err)
	}
	s.startUpload(st)
	return Info{Key: key, Bytes: st.Bytes, Remote: RemotePending}, nil
}

// Resume restarts the uploads of keys committed here that are not Ready
// (a previous process died, or they Failed: a restart gives them a new
// deadline). Each goes back to Pending before Resume returns.
func (s *S3) Resume(ctx context.Context) error {
	ents, err := os.ReadDir(filepath.Join(s.root, metaDir, "state"))
	if err != nil {
		return fmt.Errorf("store: resume: %w", err)
	}
	for _, e := range ents {
		if err := s.resumeOne(e.Name()); err != nil {
			return err
		}
	}
	return nil
}

func (s *S3) resumeOne(name string) error {
	key, err := unescapeKey(strings.TrimSuffix(name, ".json"))
	if err != nil || !strings.HasSuffix(name, ".json") || checkKey(key) != nil {
		return nil // not a state file of ours (temp files start with '.')
	}
	unlock := s.locks.lock(key)
	defer unlock()
	st, ok, err := s.loadState(key)
	if err != nil {
		return fmt.Errorf("store: resume %s: %w", key, err)
	}
	if !ok || st.Origin != originLocal || st.Remote == RemoteReady || s.running(key) {
		return nil
	}
	s.cfg.Logf("store: resuming upload of %s (%s)", key, st.Remote)
	// Pending before Resume returns: a Failed key must not read Failed
	// after it was resumed.
	st.Remote, st.Message = RemotePending, "resumed after "+strings.ToLower(string(st.Remote))
	if err := writeJSON(s.statePath(key), st); err != nil {
		return fmt.Errorf("store: resume %s: %w", key, err)
	}
	s.startUpload(st)
	return nil
}

// Open implements Store: local data at once; otherwise the key is
// downloaded, verified and only then returned.
func (s *S3) Open(ctx context.Context, key string) (string, func(), error) {
	if err := checkKey(key); err != nil {
		return "", nil, err
	}
	unlock := s.locks.lock(key)
	defer unlock()
	_, ok, err := s.loadState(key)
	if err != nil {
		return "", nil, fmt.Errorf("store: open %s: %w", key, err)
	}
	dir := s.Dir(key)
	have, err := exists(dir)
	if err != nil {
		return "", nil, fmt.Errorf("store: open %s: %w", key, err)
	}
	switch {
	case ok && have:
		// Committed here, or downloaded and verified before.
	case have:
		return "", nil, uncommitted("open", key, dir)
	default:
		// Remote only (or a crash between recording a download and
		// moving it in place): fetch it.
		if err := s.fetch(ctx, key); err != nil {
			return "", nil, err
		}
	}
	return dir, s.use(key), nil
}

// Status implements Store: this node's state for keys it wrote or
// downloaded, else the remote's completion marker.
func (s *S3) Status(ctx context.Context, key string) (Status, error) {
	if err := checkKey(key); err != nil {
		return Status{}, err
	}
	st, ok, err := s.loadState(key)
	if err != nil {
		return Status{}, fmt.Errorf("store: status %s: %w", key, err)
	}
	if ok {
		return Status{Remote: st.Remote, Message: st.Message, Bytes: st.Bytes, ReadyTime: st.ReadyTime}, nil
	}
	if have, err := exists(s.Dir(key)); err != nil || have {
		return Status{}, uncommitted("status", key, s.Dir(key))
	}
	return s.remoteStatus(ctx, key)
}

// remoteStatus is the status of a key another node committed.
func (s *S3) remoteStatus(ctx context.Context, key string) (Status, error) {
	m, err := s.readMarker(ctx, key)
	if err == nil {
		return Status{Remote: RemoteReady, Bytes: m.Bytes, ReadyTime: m.ReadyTime}, nil
	}
	if errors.Is(err, ErrNotReady) {
		return Status{Remote: RemoteInProgress, Message: "objects present but no completion marker: the upload is under way on another node (or was abandoned)"}, nil
	}
	return Status{}, fmt.Errorf("store: status %s: %w", key, err)
}

// Delete implements Store: the upload stops, the marker goes first (no
// node sees Ready while objects disappear), then the other objects, then
// the local copy. If the remote cannot be reached the local copy stays,
// so a retried Delete finds everything again.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	unlock := s.locks.lock(key)
	defer unlock()
	if s.pins.pinned(key) {
		return inUse(key)
	}
	s.stopUpload(key)
	if uncommitted, err := s.uncommittedHere(key); err != nil || uncommitted {
		// Written here and never committed: nothing of it was uploaded
		// (uploads start at Commit; keys are written by one node), so a
		// remote that is down does not hold up the cleanup.
		if err == nil {
			err = removeAll(s.Dir(key))
		}
		if err != nil {
			return fmt.Errorf("store: delete %s: %w", key, err)
		}
		return nil
	}
	remote, err := s.deleteRemote(ctx, key)
	if err != nil {
		return fmt.Errorf("store: delete %s: %w", key, err)
	}
	local := false
	for _, p := range []string{s.statePath(key), s.Dir(key)} {
		ok, err := exists(p)
		if err == nil && ok {
			local = true
			err = removeAll(p)
		}
		if err != nil {
			return fmt.Errorf("store: delete %s: %w", key, err)
		}
	}
	s.cache.forget(key)
	if !remote && !local {
		return fmt.Errorf("store: delete %s: %w", key, ErrNotFound)
	}
	return nil
}

// uncommittedHere: key's directory exists here without this node's
// record of a commit or a download.
func (s *S3) uncommittedHere(key string) (bool, error) {
	dir, err := exists(s.Dir(key))
	if err != nil || !dir {
		return false, err
	}
	state, err := exists(s.statePath(key))
	return !state, err
}

func (s *S3) deleteRemote(ctx context.Context, key string) (found bool, err error) {
	var names []string
	mark := s.object(key, markerName)
	for o := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.object(key, ""), Recursive: true}) {
		if o.Err != nil {
			return false, fmt.Errorf("list s3://%s/%s: %w", s.cfg.Bucket, s.object(key, ""), o.Err)
		}
		if o.Key == mark {
			names = append([]string{o.Key}, names...)
		} else {
			names = append(names, o.Key)
		}
	}
	for _, n := range names {
		if err := s.client.RemoveObject(ctx, s.cfg.Bucket, n, minio.RemoveObjectOptions{}); err != nil {
			return true, fmt.Errorf("remove s3://%s/%s: %w", s.cfg.Bucket, n, err)
		}
	}
	return len(names) > 0, nil
}

// Usage implements Store; RemoteBytes lists the bucket under Prefix.
func (s *S3) Usage(ctx context.Context) (Usage, error) {
	n, err := countRecords(filepath.Join(s.root, metaDir, "state"))
	if err != nil {
		return Usage{}, fmt.Errorf("store: usage: %w", err)
	}
	u := Usage{Keys: n, LocalBytes: allocated(s.root)}
	for o := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.cfg.Prefix, Recursive: true}) {
		if o.Err != nil {
			return u, fmt.Errorf("store: usage: list s3://%s/%s: %w", s.cfg.Bucket, s.cfg.Prefix, o.Err)
		}
		u.RemoteBytes += o.Size
	}
	return u, nil
}

// Package store keeps snapshot data and says whether another node may
// restore it (remoteStatus).
//
// A snapshot is a directory of files written by the VM layer. Later
// snapshots may name a file of an earlier one by absolute path, so data
// never moves once written: the store hands out the directory to write
// into (Dir), the writer fills and fsyncs it, and Commit records it.
//
// Backends:
//
//   - Local: a directory; the data never leaves the node
//     (RemoteNotApplicable).
//   - S3: written locally, uploaded in the background to any S3-compatible
//     store, each object verified, and a completion marker written last;
//     other nodes download into their cache on Open, bounded by
//     CacheMaxBytes with LRU eviction (s3cache.go). Tested against a real
//     MinIO (internal/minio).
//   - JuiceFS: a directory on a JuiceFS CSI mount written with --writeback;
//     a key is Ready once none of its files' objects is left in the
//     writer's client's staging (juicefs_watch.go); other nodes read it in
//     place. Tested on a live JuiceFS (test/juicefs).
//
// The shared backends sign what a node puts in them and check what a
// node reads from them with the cluster's Keys (keys.go): data changed by
// a writer of the bucket or the volume fails with ErrIntegrity.
//
// Every backend passes the conformance suite in store/storetest.
package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// Store is where snapshot data lives.
type Store interface {
	// Dir is the local directory for key (e.g. "snapshots/<uid>"); it does
	// not exist yet: the caller creates it by writing the snapshot there.
	// Dir is "" for an invalid key (the other methods say why).
	Dir(key string) string
	// Commit records that Dir(key) is complete (fsynced by the writer) and
	// starts making it available to other nodes; it returns once that is
	// under way and never waits for an upload.
	Commit(ctx context.Context, key string) (Info, error)
	// Open makes key's data available on this node for a restore,
	// downloading it first if it is only remote, and returns its local
	// directory. release must be called once the restore no longer needs
	// the data; Delete is refused (ErrInUse) until then.
	Open(ctx context.Context, key string) (dir string, release func(), err error)
	// Status is whether another node may restore key now.
	Status(ctx context.Context, key string) (Status, error)
	// Delete removes key everywhere: ErrInUse while this node has it
	// open, ErrNotFound if nothing of it exists. It also removes data
	// written but never committed (a failed snapshot's leftovers).
	Delete(ctx context.Context, key string) error
	// Usage sums what the store holds.
	Usage(ctx context.Context) (Usage, error)
}

var (
	// ErrInUse: the data is open for a restore on this node.
	ErrInUse = errors.New("store: data in use")
	// ErrNotFound: nothing of the key exists.
	ErrNotFound = errors.New("store: not found")
	// ErrNotCommitted: data was written for the key but never committed
	// (for example the process died first); it is never reported Ready.
	ErrNotCommitted = errors.New("store: not committed")
	// ErrNotReady: the key was committed on another node but has not
	// reached the remote yet (or its upload failed), so it cannot be
	// restored here.
	ErrNotReady = errors.New("store: not ready for other nodes")
)

// RemoteState answers: may another node restore a key now? The agent
// reports it as the data's remoteStatus. The S3 backend records it in its
// state files, so the values never change.
type RemoteState string

const (
	// RemotePending: committed, its upload queued.
	RemotePending RemoteState = "Pending"
	// RemoteInProgress: on its way to the remote (an upload, a JuiceFS
	// writeback), or retrying.
	RemoteInProgress RemoteState = "InProgress"
	// RemoteReady: another node may restore it.
	RemoteReady RemoteState = "Ready"
	// RemoteFailed: it will not reach the remote (Status says why).
	RemoteFailed RemoteState = "Failed"
	// RemoteNotApplicable: a store whose data never leaves the node.
	RemoteNotApplicable RemoteState = "NotApplicable"
)

// Info describes a committed key.
type Info struct {
	Key string
	// Bytes is the sum of the files' sizes (what a copy moves; sparse
	// files count their holes). Usage reports allocated blocks.
	Bytes  int64
	Remote RemoteState
}

// Status is a key's remote status.
type Status struct {
	Remote RemoteState
	// Message says why the status is not Ready yet (retries, failures).
	Message   string
	Bytes     int64
	ReadyTime time.Time
}

// Usage sums what a store holds.
type Usage struct {
	// Keys this node knows (committed here, or downloaded).
	Keys int
	// LocalBytes is the node's disk taken by the store (allocated blocks).
	LocalBytes int64
	// RemoteBytes is what the remote holds (0 for local).
	RemoteBytes int64
}

// A key is slash-separated names; no name starts with '.' (the store keeps
// its own files under dot-names) or '-'.
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$`)

const maxKeyLen = 512

// checkKey refuses keys that could escape the store's directory or collide
// with its metadata.
func checkKey(key string) error {
	if len(key) > maxKeyLen || !keyPattern.MatchString(key) {
		return fmt.Errorf("store: invalid key %q: want slash-separated names of [A-Za-z0-9_.-], not starting with '.' or '-'", key)
	}
	return nil
}

// keyLocks serializes the operations on one key (Commit, Open, Delete)
// so a Delete can never race an Open that is pinning the data.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu sync.Mutex
	n  int // holders and waiters; the entry goes when it drops to 0
}

func (l *keyLocks) lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*keyLock{}
	}
	k := l.m[key]
	if k == nil {
		k = &keyLock{}
		l.m[key] = k
	}
	k.n++
	l.mu.Unlock()
	k.mu.Lock()
	return l.unlocker(key, k)
}

// tryLock takes key's lock only if nobody holds or awaits it: cache
// eviction skips busy keys rather than wait on the Open that started it.
func (l *keyLocks) tryLock(key string) (unlock func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[key] != nil {
		return nil, false
	}
	if l.m == nil {
		l.m = map[string]*keyLock{}
	}
	k := &keyLock{n: 1}
	k.mu.Lock() // new, so it cannot block
	l.m[key] = k
	return l.unlocker(key, k), true
}

func (l *keyLocks) unlocker(key string, k *keyLock) func() {
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.n--; k.n == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}

// pins counts the unreleased Opens of each key.
type pins struct {
	mu sync.Mutex
	n  map[string]int
}

// pin returns the release function Open hands out; calling it more than
// once releases once.
func (p *pins) pin(key string) (release func()) {
	p.mu.Lock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[key]++
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.n[key]--; p.n[key] <= 0 {
				delete(p.n, key)
			}
			p.mu.Unlock()
		})
	}
}

func (p *pins) pinned(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[key] > 0
}

// inUse is the error Delete returns for a pinned key.
func inUse(key string) error {
	return fmt.Errorf("store: delete %s: %w (a restore has it open)", key, ErrInUse)
}

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

// metaDir holds a store's own files under its root; keys cannot start
// with '.', so it never collides with data.
const metaDir = ".store"

// Local keeps snapshots in a directory on this node; they never leave it.
type Local struct {
	root  string
	locks keyLocks
	pins  pins
}

var _ Store = (*Local)(nil)

// localRecord is the commit record of a key.
type localRecord struct {
	Key        string      `json:"key"`
	Files      []fileEntry `json:"files"`
	Bytes      int64       `json:"bytes"`
	CommitTime time.Time   `json:"commitTime"`
}

// NewLocal opens (creating) a local store at root.
func NewLocal(root string) (*Local, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("store: local root %q is not absolute (snapshot manifests refer to files by absolute path)", root)
	}
	if err := os.MkdirAll(filepath.Join(root, metaDir, "records"), 0o700); err != nil {
		return nil, fmt.Errorf("store: local root: %w", err)
	}
	return &Local{root: filepath.Clean(root)}, nil
}

// Dir implements Store.
func (l *Local) Dir(key string) string { return keyDir(l.root, key) }

// keyDir is key's directory under root, "" for an invalid key.
func keyDir(root, key string) string {
	if checkKey(key) != nil {
		return ""
	}
	return filepath.Join(root, filepath.FromSlash(key))
}

func (l *Local) recordPath(key string) string {
	return filepath.Join(l.root, metaDir, "records", escapeKey(key)+".json")
}

// Commit implements Store: the record is written durably, so a crash
// after Commit returns keeps the key committed and one before does not.
func (l *Local) Commit(ctx context.Context, key string) (Info, error) {
	if err := checkKey(key); err != nil {
		return Info{}, err
	}
	unlock := l.locks.lock(key)
	defer unlock()
	rec, err := commitRecord(key, l.Dir(key))
	if err != nil {
		return Info{}, err
	}
	if err := writeJSON(l.recordPath(key), rec); err != nil {
		return Info{}, fmt.Errorf("store: commit %s: record: %w", key, err)
	}
	return Info{Key: key, Bytes: rec.Bytes, Remote: RemoteNotApplicable}, nil
}

// commitRecord scans a written snapshot dir.
func commitRecord(key, dir string) (localRecord, error) {
	files, err := scanDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return localRecord{}, fmt.Errorf("store: commit %s: %w: nothing written at %s", key, ErrNotFound, dir)
	}
	if err != nil {
		return localRecord{}, fmt.Errorf("store: commit %s: %w", key, err)
	}
	return localRecord{Key: key, Files: files, Bytes: sumSizes(files), CommitTime: time.Now().UTC()}, nil
}

func (l *Local) record(op, key string) (localRecord, error) {
	var rec localRecord
	err := readJSON(l.recordPath(key), &rec)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, uncommitted(op, key, l.Dir(key))
	}
	if err != nil {
		return rec, fmt.Errorf("store: %s %s: %w", op, key, err)
	}
	return rec, nil
}

// Open implements Store; only keys committed on this node can be opened.
func (l *Local) Open(ctx context.Context, key string) (string, func(), error) {
	if err := checkKey(key); err != nil {
		return "", nil, err
	}
	unlock := l.locks.lock(key)
	defer unlock()
	if _, err := l.record("open", key); err != nil {
		return "", nil, err
	}
	return l.Dir(key), l.pins.pin(key), nil
}

// Status implements Store: local data is never restorable elsewhere.
func (l *Local) Status(ctx context.Context, key string) (Status, error) {
	if err := checkKey(key); err != nil {
		return Status{}, err
	}
	rec, err := l.record("status", key)
	if err != nil {
		return Status{}, err
	}
	return Status{Remote: RemoteNotApplicable, Message: "local store: the data stays on this node", Bytes: rec.Bytes}, nil
}

// Delete implements Store. The record goes first: a crash midway leaves
// uncommitted leftovers (which Delete removes again), never a committed
// key with missing files.
func (l *Local) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	unlock := l.locks.lock(key)
	defer unlock()
	if l.pins.pinned(key) {
		return inUse(key)
	}
	found := false
	for _, p := range []string{l.recordPath(key), l.Dir(key)} {
		ok, err := exists(p)
		if err != nil {
			return fmt.Errorf("store: delete %s: %w", key, err)
		}
		if !ok {
			continue
		}
		found = true
		if err := removeAll(p); err != nil {
			return fmt.Errorf("store: delete %s: %w", key, err)
		}
	}
	if !found {
		return fmt.Errorf("store: delete %s: %w", key, ErrNotFound)
	}
	return nil
}

// Usage implements Store.
func (l *Local) Usage(ctx context.Context) (Usage, error) {
	n, err := countRecords(filepath.Join(l.root, metaDir, "records"))
	if err != nil {
		return Usage{}, fmt.Errorf("store: usage: %w", err)
	}
	return Usage{Keys: n, LocalBytes: allocated(l.root)}, nil
}

// countRecords counts the "<key>.json" files of dir.
func countRecords(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n, nil
}

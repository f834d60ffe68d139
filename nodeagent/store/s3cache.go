package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The s3 backend's cache bound. Only local copies whose remote copy is
// complete count against S3Config.CacheMaxBytes: downloads, and keys this
// node wrote once they are Ready. A key whose upload has not finished is
// the only copy of its data, so it is neither counted nor ever evicted.
// Evicted keys are the least recently used (Open or release) with no open
// handle; a later Open downloads them again.

// cacheIndex is the in-memory account of the evictable copies.
type cacheIndex struct {
	mu      sync.Mutex
	entries map[string]*cacheEntry
	bytes   int64
	tick    uint64 // a logical clock: the LRU order never ties

	evictions atomic.Int64

	trimMu sync.Mutex  // one trim at a time: two would evict twice the need
	queued atomic.Bool // a background trim is pending
}

type cacheEntry struct {
	bytes int64 // allocated blocks (sparse holes cost nothing)
	used  uint64
}

// CacheStats reports the s3 backend's download cache.
type CacheStats struct {
	// MaxBytes is the cap (0: unbounded).
	MaxBytes int64
	// Bytes and Keys are the local copies whose remote copy is complete;
	// Bytes may exceed MaxBytes while everything else is open.
	Bytes int64
	Keys  int
	// Evictions counts the copies evicted since the store was opened.
	Evictions int64
}

// CacheStats reports the cache's size against its cap.
func (s *S3) CacheStats() CacheStats {
	c := &s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{MaxBytes: s.cfg.CacheMaxBytes, Bytes: c.bytes, Keys: len(c.entries), Evictions: c.evictions.Load()}
}

func (c *cacheIndex) put(key string, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*cacheEntry{}
	}
	if e := c.entries[key]; e != nil {
		c.bytes -= e.bytes
	}
	c.tick++
	c.entries[key] = &cacheEntry{bytes: bytes, used: c.tick}
	c.bytes += bytes
}

// touch marks key used now; keys not in the cache are ignored.
func (c *cacheIndex) touch(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		c.tick++
		e.used = c.tick
	}
}

func (c *cacheIndex) forget(key string) (bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		bytes = e.bytes
		c.bytes -= e.bytes
		delete(c.entries, key)
	}
	return bytes
}

func (c *cacheIndex) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[key] != nil
}

func (c *cacheIndex) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// lru lists the keys, least recently used first.
func (c *cacheIndex) lru() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.entries))
	for k := range c.entries {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return compareUint(c.entries[a].used, c.entries[b].used) })
	return keys
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cacheCap validates the cap, or derives it from CacheMaxDiskPercent of
// CacheRoot's filesystem (which must exist).
func (c *S3Config) cacheCap() error {
	if c.CacheMaxBytes < 0 || c.CacheMaxDiskPercent < 0 || c.CacheMaxDiskPercent > 100 {
		return fmt.Errorf("store: s3: CacheMaxBytes %d must be >= 0 and CacheMaxDiskPercent %d within 0-100", c.CacheMaxBytes, c.CacheMaxDiskPercent)
	}
	if c.CacheMaxBytes > 0 || c.CacheMaxDiskPercent == 0 {
		return nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(c.CacheRoot, &fs); err != nil {
		return fmt.Errorf("store: s3: size of the cache's filesystem: statfs %s: %w", c.CacheRoot, err)
	}
	c.CacheMaxBytes = max(1, int64(fs.Blocks)*fs.Bsize/100*int64(c.CacheMaxDiskPercent))
	return nil
}

// loadCache indexes the complete copies a previous process left. Their
// last use is not persisted, so the order they became local (the state
// file's mtime) stands in for it.
func (s *S3) loadCache() error {
	dir := filepath.Join(s.root, metaDir, "state")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store: s3 cache: %w", err)
	}
	type found struct {
		key string
		mod time.Time
	}
	var keys []found
	for _, e := range ents {
		key, err := unescapeKey(strings.TrimSuffix(e.Name(), ".json"))
		if err != nil || !strings.HasSuffix(e.Name(), ".json") || checkKey(key) != nil {
			continue // a temp file
		}
		st, ok, err := s.loadState(key)
		if err != nil || !ok || st.Remote != RemoteReady {
			continue // unreadable states are reported where the key is used
		}
		info, err := e.Info()
		if have, _ := exists(s.Dir(key)); err == nil && have {
			keys = append(keys, found{key, info.ModTime()})
		}
	}
	slices.SortFunc(keys, func(a, b found) int { return a.mod.Compare(b.mod) })
	for _, k := range keys {
		s.cache.put(k.key, allocated(s.Dir(k.key)))
	}
	st := s.CacheStats()
	s.cfg.Logf("store: cache %s: %d complete copies, %d bytes; cap %d bytes (0: unbounded)", s.root, st.Keys, st.Bytes, st.MaxBytes)
	return nil
}

// cached counts key's local copy now that its remote copy is complete
// (downloaded, or uploaded and verified), then trims the cache.
func (s *S3) cached(ctx context.Context, key string) {
	s.cache.put(key, allocated(s.Dir(key)))
	s.trim(ctx, 0)
}

// use pins key for a restore and marks it used at Open and at release:
// the LRU order is by last use. After a release the cache may be trimmed,
// since it may have gone over the cap while everything was open.
func (s *S3) use(key string) (release func()) {
	s.cache.touch(key)
	unpin := s.pins.pin(key)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.cache.touch(key)
			unpin()
			s.trimLater()
		})
	}
}

// storedBytes is what downloading m writes (holes are not stored).
func storedBytes(m marker) int64 {
	var n int64
	for _, f := range m.Files {
		n += f.objectSize()
	}
	return n
}

// trim evicts until the cache plus reserve (a download about to land)
// fits under the cap. What cannot be evicted stays: a restore never fails
// for the cap, the cache only exceeds it.
func (s *S3) trim(ctx context.Context, reserve int64) {
	limit := s.cfg.CacheMaxBytes
	if limit <= 0 || s.cache.size()+reserve <= limit {
		return
	}
	s.cache.trimMu.Lock()
	defer s.cache.trimMu.Unlock()
	for _, key := range s.cache.lru() {
		if s.cache.size()+reserve <= limit || ctx.Err() != nil {
			return
		}
		if err := s.evict(ctx, key); err != nil {
			s.cfg.Logf("store: cache: keeping %s: %v", key, err)
		}
	}
	if over := s.cache.size() + reserve - limit; over > 0 {
		s.cfg.Logf("store: cache: %d bytes over its %d-byte cap: nothing else can go (open, busy, or not in the bucket yet)", over, limit)
	}
}

// evict drops key's local copy unless it is open or busy (its lock is
// held, by the Open whose download started this trim for one) and only
// once the bucket is seen to hold it complete.
func (s *S3) evict(ctx context.Context, key string) error {
	unlock, ok := s.locks.tryLock(key)
	if !ok {
		return nil
	}
	defer unlock()
	if s.pins.pinned(key) || !s.cache.has(key) {
		return nil
	}
	if held := s.held.Load(); held != nil && (*held)(key) {
		return errHeld
	}
	st, ok, err := s.loadState(key)
	if err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	if !ok || st.Remote != RemoteReady {
		return fmt.Errorf("evict: this node does not record it Ready (%s)", st.Remote)
	}
	if _, err := s.readMarker(ctx, key); err != nil {
		return fmt.Errorf("the bucket's copy is not complete: %w", err)
	}
	// Moved aside first: a crash leaves the whole copy or a state without
	// a dir (which Open downloads again), never a partial dir Open trusts.
	aside, err := os.MkdirTemp(filepath.Join(s.root, metaDir, "tmp"), escapeKey(key)+"-evicted-")
	if err == nil {
		err = os.Rename(s.Dir(key), filepath.Join(aside, "data")) // os.Rename refuses an existing dir
	}
	if err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	bytes := s.cache.forget(key)
	s.cache.evictions.Add(1)
	if err := os.Remove(s.statePath(key)); err != nil && !os.IsNotExist(err) {
		s.cfg.Logf("store: cache: evict %s: %v", key, err) // Open downloads it again all the same
	}
	if err := removeAll(aside); err != nil {
		s.cfg.Logf("store: cache: evict %s: %v (removed at the next start)", key, err)
	}
	s.cfg.Logf("store: cache: evicted %s (%d bytes)", key, bytes)
	return nil
}

// errHeld: a sandbox on this node was restored from the key (or from
// data that builds on it), so its copy stays whatever the cap.
var errHeld = errors.New("a sandbox on this node restores from it")

// HoldWhile makes eviction ask held first: a key it holds is kept, as an
// open one is. The node agent holds what its running sandboxes were
// restored from (and what that builds on): a later snapshot, rollback or
// restore on this node finds those files where their manifests say,
// long after the restore's own Open was released.
func (s *S3) HoldWhile(held func(key string) bool) { s.held.Store(&held) }

// trimLater trims in the background if the cache is over its cap.
func (s *S3) trimLater() {
	if limit := s.cfg.CacheMaxBytes; limit <= 0 || s.cache.size() <= limit || !s.cache.queued.CompareAndSwap(false, true) {
		return
	}
	s.mu.Lock() // as startUpload: no wg.Add after Close's Wait
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		s.cache.queued.Store(false)
		return
	}
	s.wg.Go(func() {
		s.cache.queued.Store(false)
		s.trim(s.ctx, 0)
	})
}

package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/api/snapshot"
)

// Whoever can write the JuiceFS volume can change a key's files after
// they were committed. The committing node signs a record of them (each
// file's size and sha256, hashed at Commit, when it wrote them) and the
// manifest's bytes; Open checks the signatures and hashes the files
// against the record before it hands the directory out. A node that saw
// the files unchanged since it hashed them (same inode, size, mtime and
// ctime: the committer at Commit, or a reader at an earlier Open) does
// not hash them again.
//
// The record also holds each file's layout: the objects the client lists
// for it (JuiceFSObjects), which JuiceFS never rewrites, so a write to the
// file through any mount, or to its metadata, changes the layout. Open
// checks the layouts — metadata only, no data read — and hashes the
// content only when a layout differs (compaction rewrites a fragmented
// file's objects) or VerifyContent asks for it (the defence against a
// writer of the bucket itself when the volume is not encrypted).
//
// The data is read in place, so the check cannot stop a writer who
// changes a file after Open, before QEMU opens it; it catches everything
// changed before. (The s3 store downloads into a node-local copy and has
// no such window.)

// jfsSigned holds the signed records, one per key.
const jfsSigned = "signed"

// jfsRecord is what the committing node signs for a key.
type jfsRecord struct {
	Key               string      `json:"key"`
	Files             []fileEntry `json:"files"`
	ManifestSignature string      `json:"manifestSignature,omitempty"`
	Node              string      `json:"node"`
	// Layouts: file path → sha256 of its objects' list at Commit.
	Layouts map[string]string `json:"layouts,omitempty"`
}

// signedRecord is a record file: the record's exact JSON and its signature.
type signedRecord struct {
	Record    json.RawMessage `json:"record"`
	Signature string          `json:"signature"`
}

func (j *JuiceFS) signedPath(key string) string {
	return filepath.Join(j.meta, jfsSigned, escapeKey(key)+".json")
}

// sign writes the signed record of key's files: their sizes, layouts and
// sha256 — those this node computed writing them (knownSums), the others
// hashed now.
func (j *JuiceFS) sign(key string, files []fileEntry) error {
	dir := j.Dir(key)
	fp, err := fingerprint(dir, files) // before hashing: a change meanwhile shows at Open
	if err != nil {
		return err
	}
	rec := jfsRecord{Key: key, Node: j.cfg.Node, Layouts: map[string]string{}}
	known := knownSums(dir)
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if k, ok := known[f.Path]; ok && k.Size == f.Size {
			f.SHA256, f.Extents, f.ObjectSHA256 = k.SHA256, k.Extents, k.ObjectSHA256
		} else {
			sum, n, err := hashFile(p)
			if err != nil {
				return err
			}
			if n != f.Size {
				return fmt.Errorf("%s changed while it was committed", p)
			}
			f.SHA256 = sum
		}
		rec.Files = append(rec.Files, f)
		if rec.Layouts[f.Path], err = j.layout(p); err != nil {
			return err
		}
	}
	if slices.ContainsFunc(files, func(f fileEntry) bool { return f.Path == manifestName }) {
		b, err := os.ReadFile(filepath.Join(dir, manifestName))
		if err != nil {
			return err
		}
		rec.ManifestSignature = j.cfg.Keys.sign(purposeManifest, key, b)
	}
	payload, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	data, err := json.Marshal(signedRecord{Record: payload, Signature: j.cfg.Keys.sign(purposeRecord, key, payload)})
	if err != nil {
		return err
	}
	if err := writeFileAtomic(j.signedPath(key), data); err != nil {
		return err
	}
	j.remember(key, fp)
	return nil
}

// knownSums are the sha256 this node computed when it wrote dir's files,
// so signing them reads nothing back through FUSE: the snapshot's own
// files in its manifest (the VM layer hashes them as it seals the
// snapshot) and a base disk's in its sidecar (snapshot.ReadDiskSum).
func knownSums(dir string) map[string]fileEntry {
	known := map[string]fileEntry{}
	// A sparse layer is sealed by the sha256 of its data extents
	// (DataSHA256) instead of the whole file's.
	if m, err := snapshot.ReadManifest(dir); err == nil {
		for _, f := range []*snapshot.FileRef{&m.State, &m.Disk, &m.Memory, m.MemoryLayer} {
			switch {
			case f == nil || f.Path == "" || strings.Contains(f.Path, "/"):
			case len(f.SHA256) == 64:
				known[f.Path] = fileEntry{Path: f.Path, Size: f.Size, SHA256: f.SHA256}
			case len(f.DataSHA256) == 64:
				known[f.Path] = fileEntry{Path: f.Path, Size: f.Size, Extents: m.ExtentsOf(*f), ObjectSHA256: f.DataSHA256}
			}
		}
	}
	if sum, ok := snapshot.ReadDiskSum(filepath.Join(dir, "base.ext4")); ok {
		if fi, err := os.Stat(filepath.Join(dir, "base.ext4")); err == nil {
			known["base.ext4"] = fileEntry{Path: "base.ext4", Size: fi.Size(), SHA256: sum}
		}
	}
	return known
}

// verify checks key's files against its signed record; every failure of
// the check wraps ErrIntegrity.
func (j *JuiceFS) verify(key string) error {
	rec, err := j.readRecord(key)
	if err != nil {
		return err
	}
	dir := j.Dir(key)
	files, err := scanDir(dir)
	if err != nil {
		return err
	}
	if err := sameFiles(key, files, rec.Files); err != nil {
		return err
	}
	if !j.cfg.VerifyContent && j.sameLayouts(dir, files, rec) {
		return j.checkManifest(dir, rec)
	}
	fp, err := fingerprint(dir, rec.Files)
	if err != nil {
		return err
	}
	if j.seen(key) == fp {
		return nil
	}
	for _, f := range rec.Files {
		if err := checkContent(key, filepath.Join(dir, filepath.FromSlash(f.Path)), f); err != nil {
			return err
		}
	}
	if err := j.checkManifest(dir, rec); err != nil {
		return err
	}
	j.remember(key, fp)
	return nil
}

// checkManifest checks the manifest's own signature, if the key has one.
func (j *JuiceFS) checkManifest(dir string, rec jfsRecord) error {
	if !slices.ContainsFunc(rec.Files, func(f fileEntry) bool { return f.Path == manifestName }) {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return err
	}
	return j.cfg.Keys.verify(purposeManifest, rec.Key, b, rec.ManifestSignature)
}

// layout is the sha256 of the list of objects holding p's data.
func (j *JuiceFS) layout(p string) (string, error) {
	objs, err := j.cfg.Objects(j.ctx, p)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(objs)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// sameLayouts: every file has its signed size and object layout. A
// mismatch is not yet an integrity failure: the content check decides.
func (j *JuiceFS) sameLayouts(dir string, have []fileEntry, rec jfsRecord) bool {
	if len(rec.Layouts) != len(rec.Files) {
		return false
	}
	sizes := map[string]int64{}
	for _, f := range have {
		sizes[f.Path] = f.Size
	}
	for _, f := range rec.Files {
		l, err := j.layout(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil || sizes[f.Path] != f.Size || l != rec.Layouts[f.Path] {
			if err != nil {
				j.cfg.Logf("store: juicefs: %s/%s: layout: %v; checking its content", rec.Key, f.Path, err)
			}
			return false
		}
	}
	return true
}

// readRecord reads key's signed record and checks its signature.
func (j *JuiceFS) readRecord(key string) (jfsRecord, error) {
	var rec jfsRecord
	data, err := os.ReadFile(j.signedPath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, fmt.Errorf("%w: %s has no signed record (committed before records were signed, or its record was removed)", ErrIntegrity, key)
	}
	if err != nil {
		return rec, err
	}
	var env signedRecord
	if err := json.Unmarshal(data, &env); err != nil {
		return rec, fmt.Errorf("%w: signed record of %s: %v", ErrIntegrity, key, err)
	}
	if err := j.cfg.Keys.verify(purposeRecord, key, env.Record, env.Signature); err != nil {
		return rec, err
	}
	if err := json.Unmarshal(env.Record, &rec); err != nil {
		return rec, fmt.Errorf("%w: signed record of %s: %v", ErrIntegrity, key, err)
	}
	if err := checkMarker(key, marker{Key: rec.Key, Files: rec.Files}); err != nil {
		return rec, fmt.Errorf("%w: %v", ErrIntegrity, err)
	}
	return rec, nil
}

// sameFiles: the directory holds exactly the signed files.
func sameFiles(key string, have, signed []fileEntry) error {
	names := func(fs []fileEntry) []string {
		var n []string
		for _, f := range fs {
			n = append(n, f.Path)
		}
		slices.Sort(n)
		return n
	}
	if h, s := names(have), names(signed); !slices.Equal(h, s) {
		return fmt.Errorf("%w: %s holds files %s, its signed record lists %s", ErrIntegrity, key, strings.Join(h, ", "), strings.Join(s, ", "))
	}
	return nil
}

// fingerprint identifies the files' current content without reading it:
// a write, truncate or replacement changes the ctime or the inode, and
// no one sets a ctime by hand.
func fingerprint(dir string, files []fileEntry) (string, error) {
	var b strings.Builder
	for _, f := range files {
		var st unix.Stat_t
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := unix.Stat(p, &st); err != nil {
			return "", fmt.Errorf("stat %s: %w", p, err)
		}
		fmt.Fprintf(&b, "%s:%d:%d:%d:%d.%d:%d.%d\n", f.Path, st.Dev, st.Ino, st.Size,
			st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return b.String(), nil
}

func (j *JuiceFS) remember(key, fp string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.verified[key] = fp
}

func (j *JuiceFS) seen(key string) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.verified[key]
}

func (j *JuiceFS) forget(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.verified, key)
}

// checkContent hashes a file against its signed sha256: the whole file,
// or a sparse file signed by its data extents (a disk layer) those alone.
func checkContent(key, p string, f fileEntry) error {
	if f.SHA256 == "" && f.ObjectSHA256 != "" {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		sum, err := snapshot.ExtentsSHA256(p, f.Extents)
		if err != nil {
			return err
		}
		if fi.Size() != f.Size || sum != f.ObjectSHA256 {
			return fmt.Errorf("%w: %s of %s: %d bytes with data sha256 %s, signed for %d bytes with data sha256 %s",
				ErrIntegrity, f.Path, key, fi.Size(), sum, f.Size, f.ObjectSHA256)
		}
		return nil
	}
	sum, n, err := hashFile(p)
	if err != nil {
		return err
	}
	if n != f.Size || sum != f.SHA256 {
		return integrityErr(key, f, n, sum)
	}
	return nil
}

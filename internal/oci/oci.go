// Package oci writes OCI image-layout archives, the tar `ctr images import`
// reads, for images made without a registry or a Docker daemon: the small
// images the CRI environment (internal/crienv) builds in Go, and the Debian
// rootfs hack/vm-assets.sh builds for local clusters (hack/ociimage).
//
// An archive holds one uncompressed layer. It is streamed into the archive
// file and hashed on the way, so a rootfs of hundreds of MB is never held in
// memory or written twice; uncompressed also means its digest is its diffID
// and nothing spends time on gzip for an archive that never crosses a network.
package oci

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Config is the image config's runtime part (what a container runs).
type Config struct {
	Entrypoint, Cmd, Env []string
	WorkingDir, User     string
}

// Media types of what WriteArchive writes.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// blockSize is tar's record unit: headers are one block, data is padded
// to whole blocks.
const blockSize = 512

// archiveTime is the mtime of the archive's own entries, so the same image
// gives the same archive bytes.
var archiveTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// OCI image layout JSON, only the fields written.
type (
	descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Platform    *platform         `json:"platform,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	platform struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
	}
	manifest struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}
	index struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Manifests     []descriptor `json:"manifests"`
	}
	imageConfig struct {
		Architecture string       `json:"architecture"`
		OS           string       `json:"os"`
		Config       runConfig    `json:"config"`
		RootFS       rootFS       `json:"rootfs"`
		History      []historyRow `json:"history"`
	}
	runConfig struct {
		User       string   `json:"User,omitempty"`
		Env        []string `json:"Env,omitempty"`
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		WorkingDir string   `json:"WorkingDir,omitempty"`
	}
	rootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	}
	historyRow struct {
		CreatedBy string `json:"created_by"`
	}
)

// WriteArchive writes an OCI image-layout tar at file for ref (e.g.
// "docker.io/library/name:tag"), with one layer whose tar stream is written
// by layer (called once, streaming), and returns the manifest digest
// ("sha256:..."), which is what containerd and CRI name the image by. The
// same layer bytes and cfg give the same digest. On error file is removed.
func WriteArchive(file, ref string, cfg Config, layer func(w io.Writer) error) (digest string, err error) {
	f, err := os.Create(file)
	if err != nil {
		return "", fmt.Errorf("oci: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("oci: close %s: %w", file, cerr)
		}
		if err != nil {
			os.Remove(file)
		}
	}()
	ld, err := writeLayerBlob(f, layer)
	if err != nil {
		return "", fmt.Errorf("oci: %s: layer: %w", file, err)
	}
	digest, err = writeMetadata(f, ref, cfg, ld)
	if err != nil {
		return "", fmt.Errorf("oci: %s: %w", file, err)
	}
	return digest, nil
}

// hashingWriter counts and hashes what passes through to w.
type hashingWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (hw *hashingWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}

// writeLayerBlob streams the layer as the archive's first entry. Its header
// (which holds the size and, in the name, the digest) is only known at the
// end, so a zero block is reserved at the start of f and overwritten then.
func writeLayerBlob(f *os.File, layer func(w io.Writer) error) (descriptor, error) {
	bw := bufio.NewWriterSize(f, 1<<20)
	if _, err := bw.Write(make([]byte, blockSize)); err != nil {
		return descriptor{}, err
	}
	hw := &hashingWriter{w: bw, h: sha256.New()}
	if err := layer(hw); err != nil {
		return descriptor{}, err
	}
	if _, err := bw.Write(make([]byte, padding(hw.n))); err != nil {
		return descriptor{}, err
	}
	if err := bw.Flush(); err != nil {
		return descriptor{}, err
	}
	d := descriptor{MediaType: MediaTypeLayer, Digest: "sha256:" + hex.EncodeToString(hw.h.Sum(nil)), Size: hw.n}
	hdr, err := blobHeader(d)
	if err != nil {
		return descriptor{}, err
	}
	// WriteAt leaves f's offset at the end, where the next entry goes.
	if _, err := f.WriteAt(hdr, 0); err != nil {
		return descriptor{}, err
	}
	return d, nil
}

func padding(n int64) int64 {
	return (blockSize - n%blockSize) % blockSize
}

// blobHeader is the single ustar block for d's blob entry (ustar sizes go
// to 8 GiB; a larger layer is an error, not a PAX header that would not fit
// the reserved block).
func blobHeader(d descriptor) ([]byte, error) {
	var buf bytes.Buffer
	err := tar.NewWriter(&buf).WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: blobPath(d.Digest),
		Size: d.Size, Mode: 0o644, ModTime: archiveTime, Format: tar.FormatUSTAR})
	if err != nil {
		return nil, fmt.Errorf("blob header (%d bytes): %w", d.Size, err)
	}
	if buf.Len() != blockSize {
		return nil, fmt.Errorf("blob header is %d bytes, want one block", buf.Len())
	}
	return buf.Bytes(), nil
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

// writeMetadata appends config, manifest, index.json and oci-layout after
// the layer (containerd's importer reads the whole tar before it looks at
// the index, so the order does not matter) and ends the archive.
func writeMetadata(w io.Writer, ref string, cfg Config, layer descriptor) (string, error) {
	// CreatedBy keeps this package's old path: another string would change
	// the digest of every image it writes.
	config, err := json.Marshal(imageConfig{
		Architecture: runtime.GOARCH, OS: "linux",
		Config:  runConfig{User: cfg.User, Env: cfg.Env, Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, WorkingDir: cfg.WorkingDir},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{layer.Digest}}, // uncompressed: digest = diffID
		History: []historyRow{{CreatedBy: "sandlot test/oci"}},
	})
	if err != nil {
		return "", fmt.Errorf("config: %w", err)
	}
	cd := blobDescriptor(MediaTypeConfig, config)
	man, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Config: cd, Layers: []descriptor{layer}})
	if err != nil {
		return "", fmt.Errorf("manifest: %w", err)
	}
	md := blobDescriptor(MediaTypeManifest, man)
	md.Platform = &platform{Architecture: runtime.GOARCH, OS: "linux"}
	md.Annotations = refAnnotations(ref)
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []descriptor{md}})
	if err != nil {
		return "", fmt.Errorf("index: %w", err)
	}
	tw := tar.NewWriter(w)
	for _, e := range []struct {
		name string
		data []byte
	}{
		{blobPath(cd.Digest), config},
		{blobPath(md.Digest), man},
		{"index.json", idx},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	} {
		if err := writeEntry(tw, e.name, e.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("end of archive: %w", err)
	}
	return md.Digest, nil
}

// refAnnotations name the manifest: io.containerd.image.name is what ctr
// imports it as; the OCI ref.name holds the tag alone (a full reference
// there is not portable across importers).
func refAnnotations(ref string) map[string]string {
	a := map[string]string{"io.containerd.image.name": ref}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		a["org.opencontainers.image.ref.name"] = ref[i+1:]
	}
	return a
}

func blobDescriptor(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func writeEntry(tw *tar.Writer, name string, data []byte) error {
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: archiveTime}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// TarTree writes the tree at root (not root itself) as a layer tar:
// numeric owners, permission and setuid/setgid/sticky bits, mtimes to the
// second, symlinks, hard links (the first path found holds the data),
// device nodes and FIFOs. Sockets are left out; xattrs are not kept. The
// walk is depth-first with each directory's entries in name order, so a
// parent precedes its children and the same tree gives the same bytes.
func TarTree(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	links := map[fileID]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if err := addPath(tw, p, filepath.ToSlash(rel), links); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("tar %s: %w", root, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("tar %s: %w", root, err)
	}
	return nil
}

// fileID identifies an inode, to find the other names of a hard link.
type fileID struct{ dev, ino uint64 }

func addPath(tw *tar.Writer, p, name string, links map[fileID]string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	h, err := header(p, name, fi, links)
	if err != nil || h == nil {
		return err
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if h.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	// A file that changes size under the walk fails here (short or long
	// write) rather than producing a corrupt layer.
	_, err = io.Copy(tw, f)
	return err
}

// header describes fi at name; nil for what a tar cannot hold (a socket).
func header(p, name string, fi fs.FileInfo, links map[fileID]string) (*tar.Header, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, errors.New("no stat_t")
	}
	h := &tar.Header{Name: name, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid), ModTime: fi.ModTime()}
	m := fi.Mode()
	switch {
	case m.IsRegular():
		h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		if st.Nlink > 1 {
			id := fileID{dev: uint64(st.Dev), ino: st.Ino}
			if first, seen := links[id]; seen {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				links[id] = name
			}
		}
	case m.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case m&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
	case m&fs.ModeCharDevice != 0:
		h.Typeflag = tar.TypeChar
		h.Devmajor, h.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	case m&fs.ModeDevice != 0:
		h.Typeflag = tar.TypeBlock
		h.Devmajor, h.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	case m&fs.ModeNamedPipe != 0:
		h.Typeflag = tar.TypeFifo
	default:
		return nil, nil
	}
	return h, nil
}

// ManifestDigest reads an archive's index.json and returns the digest of
// its (single) image manifest.
func ManifestDigest(archive string) (string, error) {
	idx, err := readIndex(archive)
	if err != nil {
		return "", err
	}
	if len(idx.Manifests) != 1 {
		return "", fmt.Errorf("%s: %d manifests in index.json, want 1", archive, len(idx.Manifests))
	}
	return idx.Manifests[0].Digest, nil
}

// readIndex reads an archive's index.json.
func readIndex(archive string) (*index, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f) // skips blob data by seeking: fast on a big layer
	for {
		h, err := tr.Next()
		if err != nil {
			return nil, fmt.Errorf("%s: no index.json: %w", archive, err)
		}
		if h.Name != "index.json" {
			continue
		}
		idx := &index{}
		if err := json.NewDecoder(tr).Decode(idx); err != nil {
			return nil, fmt.Errorf("%s: index.json: %w", archive, err)
		}
		return idx, nil
	}
}

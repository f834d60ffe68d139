package kubectl

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// cp moves files as a tar stream, as kubectl cp does: writeTar packs the
// local side, untar unpacks what the sandbox's tar sends. The sandbox
// is not trusted: untar writes under its destination only, and regular
// files and directories only.

// writeTar packs src (a file or a directory tree) into w, renamed to
// name: an entry "name" and, for a directory, "name/...". Entries belong
// to root (uid 0): tar in the sandbox, run as root, gives them to root
// rather than to the local user's uid. Special files are skipped (said
// on warn).
func writeTar(w io.Writer, src, name string, warn io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		return addTarEntry(tw, p, path.Join(name, filepath.ToSlash(rel)), warn)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// addTarEntry writes the entry of the local file p, named name.
func addTarEntry(tw *tar.Writer, p, name string, warn io.Writer) error {
	info, err := os.Lstat(p)
	if err != nil {
		return err
	}
	link := ""
	switch mode := info.Mode(); {
	case mode.IsRegular(), mode.IsDir():
	case mode&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	default:
		fmt.Fprintf(warn, "skipping %s: not a regular file, directory or symlink\n", p)
		return nil
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = name, 0, 0, "", ""
	if info.IsDir() {
		hdr.Name += "/"
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// untar unpacks the entries named prefix and prefix/... from r into
// dest (prefix renamed to dest), and returns how many files it wrote.
// Entries elsewhere, escaping with "..", links and special files are
// skipped and said on warn.
func untar(r io.Reader, prefix, dest string, warn io.Writer) (int, error) {
	tr := tar.NewReader(r)
	files := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("read the tar stream: %w", err)
		}
		rel, ok := entryPath(hdr.Name, prefix)
		if !ok {
			fmt.Fprintf(warn, "skipping %q: outside %s\n", hdr.Name, prefix)
			continue
		}
		target := filepath.Join(dest, filepath.FromSlash(rel))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			err = writeFile(target, tr, hdr.FileInfo().Mode().Perm())
			files++
		default:
			fmt.Fprintf(warn, "skipping %s: not a regular file or directory\n", hdr.Name)
		}
		if err != nil {
			return files, err
		}
	}
}

// entryPath is an entry's path below prefix ("" for prefix itself);
// false for one elsewhere or one that climbs out with "..".
func entryPath(name, prefix string) (string, bool) {
	name = strings.TrimPrefix(name, "./")
	clean := path.Clean("/" + name)[1:] // no "..", no leading "/"
	if clean != strings.TrimSuffix(name, "/") {
		return "", false
	}
	if prefix == "." || prefix == "/" || prefix == "" {
		return clean, true
	}
	if clean == prefix {
		return "", true
	}
	if rel, ok := strings.CutPrefix(clean, prefix+"/"); ok {
		return rel, true
	}
	return "", false
}

func writeFile(target string, r io.Reader, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", target, err)
	}
	return nil
}

// tailBuffer keeps the last bytes written to it (a remote tar's stderr),
// safe to write from the streams' goroutines.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 4096

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > tailMax {
		b.buf = b.buf[len(b.buf)-tailMax:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}

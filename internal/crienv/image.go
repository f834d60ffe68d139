package crienv

// Images built in Go (Image, File): the rootfs with busybox and the
// skeleton, its one tar layer, and the OCI archive it is written as.

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandlot-dev/sandlot/internal/oci"
)

// Image is an image built in Go. Unless NoBusybox, the rootfs has
// /bin/busybox with a symlink per applet, /etc/passwd and /etc/group, and
// Env gets a PATH if it has none.
type Image struct {
	Files      map[string]File // path in the rootfs -> content; overrides the defaults
	NoBusybox  bool
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
}

// File is a rootfs entry. Mode's type bits choose the kind: os.ModeDir for
// a directory, os.ModeSymlink for a symlink to string(Data), else a regular
// file (permissions 0644 when zero).
type File struct {
	Data []byte
	Mode os.FileMode
}

// writeOCIArchive writes img as an OCI layout tar with one layer and
// returns the manifest's digest.
func writeOCIArchive(file, ref string, img Image) (string, error) {
	files, err := img.rootfs()
	if err != nil {
		return "", err
	}
	return oci.WriteArchive(file, ref, img.config(), func(w io.Writer) error { return writeLayer(w, files) })
}

func (img Image) config() oci.Config {
	env := img.Env
	if !img.NoBusybox && !hasPath(env) {
		env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	}
	return oci.Config{User: img.User, Env: env, Entrypoint: img.Entrypoint, Cmd: img.Cmd, WorkingDir: img.WorkingDir}
}

func hasPath(env []string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			return true
		}
	}
	return false
}

// rootfs merges the skeleton, busybox and the caller's files, keyed by
// clean relative paths.
func (img Image) rootfs() (map[string]File, error) {
	files := map[string]File{}
	for _, d := range []string{"bin", "dev", "etc", "proc", "root", "sys", "usr", "var"} {
		files[d] = File{Mode: os.ModeDir | 0o755}
	}
	files["tmp"] = File{Mode: os.ModeDir | os.ModeSticky | 0o777}
	if !img.NoBusybox {
		if err := addBusybox(files); err != nil {
			return nil, err
		}
	}
	for p, f := range img.Files {
		clean := strings.TrimPrefix(path.Clean("/"+p), "/")
		if clean == "" {
			return nil, fmt.Errorf("file path %q names the root", p)
		}
		files[clean] = f
	}
	return files, nil
}

var busybox struct {
	once    sync.Once
	data    []byte
	applets []string
	err     error
}

// loadBusybox reads the binary and its applet list once per test binary.
func loadBusybox() ([]byte, []string, error) {
	busybox.once.Do(func() {
		busybox.data, busybox.err = os.ReadFile(busyboxPath)
		if busybox.err != nil {
			return
		}
		cmd := exec.Command(busyboxPath, "--list")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			busybox.err = fmt.Errorf("%s --list: %w: %s", busyboxPath, err, strings.TrimSpace(stderr.String()))
			return
		}
		busybox.applets = strings.Fields(string(out))
	})
	return busybox.data, busybox.applets, busybox.err
}

func addBusybox(files map[string]File) error {
	data, applets, err := loadBusybox()
	if err != nil {
		return err
	}
	files["bin/busybox"] = File{Data: data, Mode: 0o755}
	for _, a := range applets {
		if a != "busybox" && !strings.Contains(a, "/") {
			files["bin/"+a] = File{Data: []byte("busybox"), Mode: os.ModeSymlink | 0o777}
		}
	}
	files["usr/bin/env"] = File{Data: []byte("../../bin/busybox"), Mode: os.ModeSymlink | 0o777} // #!/usr/bin/env
	files["etc/passwd"] = File{Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")}
	files["etc/group"] = File{Data: []byte("root:x:0:\nnogroup:x:65534:\n")}
	return nil
}

// writeLayer tars files (adding missing parent directories) to w in a
// stable order.
func writeLayer(w io.Writer, files map[string]File) error {
	for p := range files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := files[d]; !ok {
				files[d] = File{Mode: os.ModeDir | 0o755}
			}
		}
	}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names) // a parent sorts before its children
	tw := tar.NewWriter(w)
	for _, name := range names {
		if err := writeRootfsEntry(tw, name, files[name]); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return tw.Close()
}

// layerTime is every entry's mtime, so the same Image gives the same digest.
var layerTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func writeRootfsEntry(tw *tar.Writer, name string, f File) error {
	h := &tar.Header{Name: name, ModTime: layerTime, Mode: tarMode(f.Mode), Format: tar.FormatPAX}
	switch {
	case f.Mode.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case f.Mode&os.ModeSymlink != 0:
		h.Typeflag, h.Linkname = tar.TypeSymlink, string(f.Data)
	default:
		h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		if f.Mode.Perm() == 0 {
			h.Mode |= 0o644
		}
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if h.Typeflag == tar.TypeReg {
		_, err := tw.Write(f.Data)
		return err
	}
	return nil
}

// tarMode converts Go's mode bits to the tar (unix) ones.
func tarMode(m os.FileMode) int64 {
	mode := int64(m.Perm())
	if m&os.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

package vm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// copySparse copies src to a new file dst, data extents only (holes stay
// holes), with copy_file_range so the kernel moves the bytes; it returns
// the extents {offset, length} it copied.
func copySparse(src, dst string, mode os.FileMode) ([][2]int64, error) {
	return copyExtents(src, dst, mode, nil)
}

// copyExtents is copySparse over the given extents instead of those
// SEEK_DATA finds: a restore knows the disk's from its manifest, and on a
// FUSE mount (JuiceFS) SEEK_DATA reports the whole file as data. Both
// paths are root's (a store, a staging directory): a file in a directory
// QEMU can write is copied with copyFromDir.
func copyExtents(src, dst string, mode os.FileMode, known [][2]int64) ([][2]int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	return copyInto(out, in, known)
}

// copyFromDir copies the file name of d (a directory QEMU can write: the
// VM's own file, one link, no symlink) to a new file dst, sparse, 0400.
func copyFromDir(d *Dir, name, dst string) ([][2]int64, error) {
	in, err := d.OpenOwned(name)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o400)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	return copyInto(out, in, nil)
}

// copyVMFile is copyFromDir of the file at path, in a directory QEMU can
// write (the VM's layer, a booted VM's RAM).
func copyVMFile(path, dst string) ([][2]int64, error) {
	d, err := OpenDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return copyFromDir(d, filepath.Base(path), dst)
}

// copyInto copies in's extents (known, or those SEEK_DATA finds) into
// out, sized as in.
func copyInto(out, in *os.File, known [][2]int64) ([][2]int64, error) {
	fi, err := in.Stat()
	if err != nil {
		return nil, err
	}
	if err := out.Truncate(fi.Size()); err != nil {
		return nil, err
	}
	extents := known
	if extents == nil {
		if extents, err = dataExtents(in, fi.Size()); err != nil {
			return nil, fmt.Errorf("seek %s: %w", in.Name(), err)
		}
	}
	for _, e := range extents {
		if e[0] < 0 || e[1] < 0 || e[0]+e[1] > fi.Size() {
			return nil, fmt.Errorf("copy %s: extent %v outside its %d bytes", in.Name(), e, fi.Size())
		}
		if err := copyExtent(in, out, e[0], e[1]); err != nil {
			return nil, fmt.Errorf("copy %s: %w", in.Name(), err)
		}
	}
	return extents, nil // seal syncs, after the VM runs again
}

// dataExtents lists f's data runs {offset, length} with SEEK_DATA/HOLE.
func dataExtents(f *os.File, size int64) ([][2]int64, error) {
	extents := [][2]int64{}
	for off := int64(0); off < size; {
		start, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return nil, err
		}
		end, err := unix.Seek(int(f.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		extents = append(extents, [2]int64{start, end - start})
		off = end
	}
	return extents, nil
}

func copyExtent(in, out *os.File, off, n int64) error {
	for n > 0 {
		roff, woff := off, off
		c, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(min(n, 1<<30)), 0)
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
			// Across filesystems (tmpfs RAM to a disk, a FUSE mount to a
			// disk) the kernel may refuse.
			return copyNonZero(out, in, off, n)
		}
		if err != nil {
			return err
		}
		if c == 0 {
			return fmt.Errorf("short copy at %d", off)
		}
		off += int64(c)
		n -= int64(c)
	}
	return nil
}

// copyNonZero copies n bytes at off, leaving all-zero runs unwritten: dst
// was truncated to size, so they read as zeros and stay holes. A source
// whose holes SEEK_DATA cannot see (JuiceFS through FUSE reports the whole
// file as data) keeps its holes in the copy.
func copyNonZero(dst io.WriterAt, src io.ReaderAt, off, n int64) error {
	buf := make([]byte, 1<<20)
	for n > 0 {
		chunk := buf[:min(int64(len(buf)), n)]
		if _, err := src.ReadAt(chunk, off); err != nil {
			return err
		}
		if !allZero(chunk) {
			if _, err := dst.WriteAt(chunk, off); err != nil {
				return err
			}
		}
		off += int64(len(chunk))
		n -= int64(len(chunk))
	}
	return nil
}

// allocated is the bytes a file really occupies.
func allocated(p string) int64 {
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

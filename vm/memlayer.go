package vm

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// A memory layer is what a restored VM changed of its base memory file:
// a sparse file of the RAM's size holding only the VM's private pages.
// Restoring maps the base copy-on-write and writes the layer's pages into
// the paused QEMU's RAM before cont: they become that VM's private pages
// again, so the next snapshot captures them too and layers never chain.

// captureLayer copies the pages of m that process pid wrote into a new
// sparse file at path and returns their runs (page index ranges): the
// manifest keeps them, so a restore writes exactly those pages even where
// a store or a copy lost the file's holes.
func captureLayer(pid int, m mapping, path string) ([][2]int64, error) {
	pages, err := privatePages(pid, m)
	if err != nil {
		return nil, err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, fmt.Errorf("open memory of %d: %w", pid, err)
	}
	defer mem.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o400)
	if err != nil {
		return nil, fmt.Errorf("create memory layer: %w", err)
	}
	defer out.Close()
	if err := out.Truncate(int64(m.End - m.Start)); err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	rs := runs(pages)
	for _, r := range rs {
		if err := copyRange(out, mem, int64(m.Start), r[0]*pageSize, (r[1]-r[0])*pageSize, buf); err != nil {
			return nil, fmt.Errorf("capture pages %d-%d: %w", r[0], r[1], err)
		}
	}
	return rs, nil // seal syncs, after the VM runs again
}

// copyMapping writes all of m (the VM's RAM: its private pages and the
// base's) into a new sparse file, skipping all-zero pages.
func copyMapping(pid int, m mapping, path string) error {
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return fmt.Errorf("open memory of %d: %w", pid, err)
	}
	defer mem.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o400)
	if err != nil {
		return fmt.Errorf("create memory file: %w", err)
	}
	defer out.Close()
	size := int64(m.End - m.Start)
	if err := out.Truncate(size); err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		chunk := buf[:min(int64(len(buf)), size-off)]
		if _, err := mem.ReadAt(chunk, int64(m.Start)+off); err != nil {
			return fmt.Errorf("read guest RAM at %d: %w", off, err)
		}
		for p := 0; p < len(chunk); p += pageSize {
			page := chunk[p:min(p+pageSize, len(chunk))]
			if !allZero(page) {
				if _, err := out.WriteAt(page, off+int64(p)); err != nil {
					return err
				}
			}
		}
	}
	return nil // seal syncs, after the VM runs again
}

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) { // memequal: vectorized
			return false
		}
		b = b[n:]
	}
	return true
}

var zeros [64 << 10]byte

// copyRange copies n bytes at off from src (at base+off) to dst (at off).
func copyRange(dst io.WriterAt, src io.ReaderAt, base, off, n int64, buf []byte) error {
	for n > 0 {
		chunk := buf[:min(int64(len(buf)), n)]
		if _, err := src.ReadAt(chunk, base+off); err != nil {
			return err
		}
		if _, err := dst.WriteAt(chunk, off); err != nil {
			return err
		}
		off += int64(len(chunk))
		n -= int64(len(chunk))
	}
	return nil
}

// applyLayer writes the layer's page runs into process pid's mapping m
// (the paused, restored VM's RAM).
func applyLayer(pid int, m mapping, path string, pageRuns [][2]int64) (int64, error) {
	layer, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open memory layer: %w", err)
	}
	defer layer.Close()
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("open memory of %d: %w", pid, err)
	}
	defer mem.Close()
	size := int64(m.End-m.Start) / pageSize
	buf := make([]byte, 1<<20)
	var applied int64
	for _, r := range pageRuns {
		if r[0] < 0 || r[1] > size || r[0] >= r[1] {
			return applied, fmt.Errorf("memory layer run %v outside the %d pages of guest RAM", r, size)
		}
		n := (r[1] - r[0]) * pageSize
		if err := copyRange(offsetWriter{mem, int64(m.Start)}, layer, 0, r[0]*pageSize, n, buf); err != nil {
			return applied, fmt.Errorf("apply memory layer pages %d-%d: %w", r[0], r[1], err)
		}
		applied += n
	}
	return applied, nil
}

// offsetWriter writes at base+off.
type offsetWriter struct {
	w    io.WriterAt
	base int64
}

func (o offsetWriter) WriteAt(p []byte, off int64) (int, error) { return o.w.WriteAt(p, o.base+off) }

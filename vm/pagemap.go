package vm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/api/snapshot"
)

const pageSize = snapshot.PageSize

// pagemap bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61 // file page or shared anonymous
)

// mapping is a range of a process's address space backed by a file.
type mapping struct {
	Start, End uintptr
	Offset     int64
}

// findMapping returns the mapping of path in process pid (the guest RAM of
// a QEMU whose memory backend is that file). Areas are matched by device
// and inode, not by name (a path reached through a symlink, or a file
// unlinked since, still matches). The kernel may show one mapping as
// several adjacent areas (QEMU madvises parts of guest RAM); they are
// joined, and must be contiguous in memory and in the file.
func findMapping(pid int, path string) (mapping, error) {
	id, err := fileID(path)
	if err != nil {
		return mapping{}, err
	}
	return findMappingByID(pid, id)
}

// fileID is a file's device and inode as /proc/<pid>/maps shows them.
func fileID(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("guest RAM file: %w", err)
	}
	return fmt.Sprintf("%02x:%02x %d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino), nil
}

// findMappingByID finds the mapping of the file with that fileID, even
// if the file has been unlinked since.
func findMappingByID(pid int, want string) (mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return mapping{}, fmt.Errorf("read maps of %d: %w", pid, err)
	}
	defer f.Close()
	var m mapping
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !sameFile(fields[3], fields[4], want) {
			continue
		}
		part, err := parseMapsRange(fields)
		if err != nil {
			return mapping{}, fmt.Errorf("bad maps line %q: %w", sc.Text(), err)
		}
		switch {
		case !found:
			m, found = part, true
		case part.Start == m.End && part.Offset == m.Offset+int64(m.End-m.Start):
			m.End = part.End
		default:
			return mapping{}, fmt.Errorf("process %d maps file %s more than once", pid, want)
		}
	}
	if !found {
		return mapping{}, fmt.Errorf("process %d does not map file %s", pid, want)
	}
	return m, nil
}

// sameFile compares a maps line's "dev inode" with want ("MM:mm inode");
// major and minor are hex there, of varying width.
func sameFile(dev, inode, want string) bool {
	maj, min, ok := strings.Cut(dev, ":")
	if !ok {
		return false
	}
	a, err1 := strconv.ParseUint(maj, 16, 32)
	b, err2 := strconv.ParseUint(min, 16, 32)
	if err1 != nil || err2 != nil {
		return false
	}
	return fmt.Sprintf("%02x:%02x %s", a, b, inode) == want
}

func parseMapsRange(fields []string) (mapping, error) {
	lo, hi, _ := strings.Cut(fields[0], "-")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	off, err3 := strconv.ParseInt(fields[2], 16, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return mapping{}, err
	}
	return mapping{Start: uintptr(start), End: uintptr(end), Offset: off}, nil
}

// privatePages returns the indexes of the pages of m that process pid
// wrote: present and not file-backed means a private copy-on-write copy
// (a page only read stays the file's page).
func privatePages(pid int, m mapping) ([]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return nil, fmt.Errorf("open pagemap of %d: %w", pid, err)
	}
	defer f.Close()
	n := int64(m.End-m.Start) / pageSize
	buf := make([]byte, 8*4096)
	var pages []int64
	for first := int64(0); first < n; first += int64(len(buf) / 8) {
		count := min(int64(len(buf)/8), n-first)
		chunk := buf[:count*8]
		if _, err := f.ReadAt(chunk, (int64(m.Start)/pageSize+first)*8); err != nil && err != io.EOF {
			return nil, fmt.Errorf("read pagemap of %d: %w", pid, err)
		}
		for i := int64(0); i < count; i++ {
			e := binary.LittleEndian.Uint64(chunk[i*8:])
			if (e&pmPresent != 0 || e&pmSwapped != 0) && e&pmFile == 0 {
				pages = append(pages, first+i)
			}
		}
	}
	return pages, nil
}

// runs groups sorted page indexes into [start, end) runs, so pages are
// copied with few, large reads.
func runs(pages []int64) [][2]int64 {
	var out [][2]int64
	for _, p := range pages {
		if len(out) > 0 && out[len(out)-1][1] == p {
			out[len(out)-1][1]++
			continue
		}
		out = append(out, [2]int64{p, p + 1})
	}
	return out
}

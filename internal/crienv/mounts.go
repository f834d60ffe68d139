package crienv

// Mounts under an Env's directories: reading /proc/self/mountinfo and
// lazily unmounting what overlay snapshots and netns left (UnmountUnder).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	Point, FSType string
}

// mountsUnder lists the mounts at or below dir.
func mountsUnder(dir string) ([]mountInfo, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []mountInfo
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		sep := indexOf(f, "-")
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			continue
		}
		p := unescapeMount(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, mountInfo{Point: p, FSType: f[sep+1]})
		}
	}
	return out, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// UnmountUnder lazily unmounts every mount under dir, deepest first.
func UnmountUnder(dir string) error { return unmountUnder(dir) }

// unmountUnder lazily unmounts everything below dir, deepest first, so the
// test's TempDir removal never walks into a live overlay or netns.
func unmountUnder(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) == "/" {
		return nil // a half-initialized Env: never touch the whole host
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Point) > len(mounts[j].Point) })
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m.Point, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.Point, err))
		}
	}
	return errors.Join(errs...)
}

package sandboxfs

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// A file's user metadata (envd 0.6.2, files.write(..., metadata)) is kept
// as extended attributes named MetadataPrefix + key, as E2B's envd keeps
// it: the key lowercased, keys and values printable US-ASCII, a key at
// most MaxMetadataKey bytes (the VFS's 255 less the prefix) and all of a
// file's names and values together at most MaxMetadataSize bytes. A
// filesystem without user xattrs (the guest's /tmp: tmpfs has them only
// from Linux 6.6) keeps them as trustedPrefix + key, which only root (the
// agent) may read or write.
const (
	MetadataPrefix  = "user.e2b."
	trustedPrefix   = "trusted.e2b."
	MetadataHeader  = "X-Metadata-"
	MaxMetadataKey  = 255 - len(MetadataPrefix)
	MaxMetadataSize = 4096
)

// MetadataFromHeader is the metadata an upload's X-Metadata-<key> headers
// carry (the first value of a repeated one), validated.
func MetadataFromHeader(h http.Header) (map[string]string, error) {
	md := map[string]string{}
	for name, values := range h {
		key, ok := cutPrefixFold(name, MetadataHeader)
		if !ok || len(values) == 0 {
			continue
		}
		key = strings.ToLower(key)
		if _, dup := md[key]; !dup {
			md[key] = values[0]
		}
	}
	return md, ValidateMetadata(md)
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

// ValidateMetadata refuses what envd refuses (with 400).
func ValidateMetadata(md map[string]string) error {
	total := 0
	for k, v := range md {
		switch {
		case k == "" || len(k) > MaxMetadataKey:
			return fmt.Errorf("metadata key %q: want 1 to %d bytes", k, MaxMetadataKey)
		case !printable(k) || strings.ContainsAny(k, " "):
			return fmt.Errorf("metadata key %q: want printable US-ASCII without spaces", k)
		case !printable(v):
			return fmt.Errorf("metadata value of %q: want printable US-ASCII", k)
		}
		total += len(MetadataPrefix) + len(k) + len(v)
	}
	if total > MaxMetadataSize {
		return fmt.Errorf("metadata of %d bytes (names with their %q prefix, and values): at most %d", total, MetadataPrefix, MaxMetadataSize)
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// SetMetadata gives the open file f exactly md (on a file just created,
// which has none: an upload replaces the metadata of what it overwrites).
func SetMetadata(f *os.File, md map[string]string) error {
	prefix := MetadataPrefix
	for k, v := range md {
		err := unix.Fsetxattr(int(f.Fd()), prefix+k, []byte(v), 0)
		if errors.Is(err, unix.ENOTSUP) && prefix == MetadataPrefix {
			prefix = trustedPrefix
			err = unix.Fsetxattr(int(f.Fd()), prefix+k, []byte(v), 0)
		}
		if err != nil {
			return fmt.Errorf("metadata %q: %w", k, err)
		}
	}
	return nil
}

// Metadata reads the metadata of the file at host path p, not following
// a final symlink; nil when it has none or its filesystem keeps none.
func Metadata(p string) (map[string]string, error) {
	names, err := listXattrs(p)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	md := map[string]string{}
	for _, name := range names {
		key, ok := strings.CutPrefix(name, MetadataPrefix)
		if !ok {
			key, ok = strings.CutPrefix(name, trustedPrefix)
		}
		if !ok {
			continue
		}
		v, err := getXattr(p, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since listed
		}
		if err != nil {
			return nil, fmt.Errorf("metadata of %s: %w", p, err)
		}
		md[key] = string(v)
	}
	if len(md) == 0 {
		return nil, nil
	}
	return md, nil
}

// listXattrs lists p's attribute names; a filesystem without xattrs has
// none.
func listXattrs(p string) ([]string, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Llistxattr(p, buf)
		switch {
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf))
			continue
		case errors.Is(err, unix.ENOTSUP):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("metadata of %s: %w", p, err)
		}
		var names []string
		for _, b := range bytes.Split(buf[:n], []byte{0}) {
			if len(b) > 0 {
				names = append(names, string(b))
			}
		}
		return names, nil
	}
}

func getXattr(p, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) && len(buf) < 1<<16 {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

package filesystem

import (
	"io/fs"
	"os"
	"path"
	"syscall"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// names caches uid/gid -> name for one request: a listing of a thousand
// files would otherwise read /etc/passwd two thousand times.
type names struct {
	root   sandboxfs.Root
	users  map[uint32]string
	groups map[uint32]string
}

func newNames(root sandboxfs.Root) *names {
	return &names{root: root, users: map[uint32]string{}, groups: map[uint32]string{}}
}

func (n *names) user(uid uint32) string {
	if name, ok := n.users[uid]; ok {
		return name
	}
	name := n.root.UserName(uid)
	n.users[uid] = name
	return name
}

func (n *names) group(gid uint32) string {
	if name, ok := n.groups[gid]; ok {
		return name
	}
	name := n.root.GroupName(gid)
	n.groups[gid] = name
	return name
}

// statEntry describes t without following a final symlink.
func (s *Service) statEntry(t target, n *names) (*pb.EntryInfo, error) {
	fi, err := os.Lstat(t.host)
	if err != nil {
		return nil, fsError("stat", t.sandbox, err)
	}
	return s.entryInfo(t.sandbox, t.host, fi, n), nil
}

// entryInfo is the SDK's EntryInfo for fi found at sandbox path sb (host
// path host), with the file's metadata (an unreadable one lists none).
func (s *Service) entryInfo(sb, host string, fi fs.FileInfo, n *names) *pb.EntryInfo {
	mode := fi.Mode()
	e := &pb.EntryInfo{
		Name:         path.Base(sb),
		Type:         fileType(mode),
		Path:         sb,
		Size:         fi.Size(),
		Mode:         uint32(mode.Perm()),
		Permissions:  permissions(mode),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = n.user(st.Uid), n.group(st.Gid)
	}
	if mode&fs.ModeSymlink != 0 {
		target := s.linkTarget(sb)
		e.SymlinkTarget = &target
	}
	e.Metadata, _ = sandboxfs.Metadata(host)
	return e
}

// linkTarget is where the symlink at sb ends up, as the sandbox names it
// (like envd's EvalSymlinks), or the raw link text if that fails.
func (s *Service) linkTarget(sb string) string {
	host, err := s.cfg.Root.Resolve(sb, "/")
	if err == nil {
		return s.cfg.Root.SandboxPath(host)
	}
	raw, err := s.hostPath(sb, false)
	if err != nil {
		return ""
	}
	text, _ := os.Readlink(raw)
	return text
}

func fileType(m fs.FileMode) pb.FileType {
	switch {
	case m.IsRegular():
		return pb.FileType_FILE_TYPE_FILE
	case m.IsDir():
		return pb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return pb.FileType_FILE_TYPE_SYMLINK
	}
	return pb.FileType_FILE_TYPE_UNSPECIFIED
}

// permissions renders m the way `ls -l` does ("drwxr-xr-x",
// "-rwsr-xr-x"); fs.FileMode.String uses Go's own letters ("L", "u").
func permissions(m fs.FileMode) string {
	b := []byte("----------")
	switch {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<uint(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	special(b, 3, m&fs.ModeSetuid != 0, 's')
	special(b, 6, m&fs.ModeSetgid != 0, 's')
	special(b, 9, m&fs.ModeSticky != 0, 't')
	return string(b)
}

// special marks a setuid/setgid/sticky bit over the execute column: the
// lower-case letter when executable, upper-case when not.
func special(b []byte, i int, set bool, c byte) {
	if !set {
		return
	}
	if b[i] == 'x' {
		b[i] = c
	} else {
		b[i] = c - 'a' + 'A'
	}
}

package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"

	pb "github.com/sandlot-dev/sandlot/guest/envdpb/filesystempb"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// Stat describes a path; a symlink is described itself, not its target.
func (s *Service) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	t, _, err := s.userTarget(ctx, req.Msg.GetPath(), false)
	if err != nil {
		return nil, err
	}
	e, err := s.statEntry(t, newNames(s.cfg.Root))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

// MakeDir is `mkdir -p`; the SDK reads already_exists as "nothing to do".
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	t, u, err := s.userTarget(ctx, req.Msg.GetPath(), true)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(t.host); err == nil {
		if fi.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %s already exists", t.sandbox))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s already exists and is not a directory", t.sandbox))
	}
	if err := sandboxfs.MkdirAll(t.host, u); err != nil {
		return nil, fsError("mkdir", t.sandbox, err)
	}
	e, err := s.statEntry(t, newNames(s.cfg.Root))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}

// Move renames source to destination; it creates no missing parents.
func (s *Service) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	src, u, err := s.userTarget(ctx, req.Msg.GetSource(), false)
	if err != nil {
		return nil, err
	}
	dst, err := s.resolve(req.Msg.GetDestination(), u, false)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(src.host); err != nil {
		return nil, fsError("move", src.sandbox, err)
	}
	if err := os.Rename(src.host, dst.host); err != nil {
		// The source exists, so a missing path is the destination's parent.
		return nil, fsError("move to", dst.sandbox, err)
	}
	e, err := s.statEntry(dst, newNames(s.cfg.Root))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

// Remove deletes a file, a symlink (not its target) or a directory tree.
func (s *Service) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	t, _, err := s.userTarget(ctx, req.Msg.GetPath(), false)
	if err != nil {
		return nil, err
	}
	if t.sandbox == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("refusing to remove /"))
	}
	// A missing path is no error (E2B's envd removes with RemoveAll too):
	// code that cleans up before it writes runs unchanged.
	if err := os.RemoveAll(t.host); err != nil {
		return nil, fsError("remove", t.sandbox, err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// ListDir lists a directory's entries and, for depth > 1, those of its
// subdirectories down to that depth. Symlinks are listed, not followed.
func (s *Service) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	t, _, err := s.userTarget(ctx, req.Msg.GetPath(), true)
	if err != nil {
		return nil, err
	}
	if err := s.checkDir(t); err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	entries, err := s.walk(t, depth)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: entries}), nil
}

// checkDir fails unless t is an existing directory.
func (s *Service) checkDir(t target) error {
	fi, err := os.Stat(t.host)
	if err != nil {
		return fsError("stat", t.sandbox, err)
	}
	if !fi.IsDir() {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s is not a directory", t.sandbox))
	}
	return nil
}

func (s *Service) walk(t target, depth int) ([]*pb.EntryInfo, error) {
	n := newNames(s.cfg.Root)
	entries := []*pb.EntryInfo{}
	err := filepath.WalkDir(t.host, func(host string, d fs.DirEntry, err error) error {
		if host == t.host {
			return err // the directory itself: only its failure matters
		}
		if err != nil {
			return nil // an unreadable subdirectory: list what can be read
		}
		rel, relErr := filepath.Rel(t.host, host)
		if relErr != nil {
			return relErr
		}
		fi, infoErr := d.Info()
		if infoErr != nil {
			return nil // gone since it was read
		}
		entries = append(entries, s.entryInfo(path.Join(t.sandbox, filepath.ToSlash(rel)), host, fi, n))
		if d.IsDir() && strings.Count(rel, string(filepath.Separator))+1 >= depth {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fsError("list", t.sandbox, err)
	}
	return entries, nil
}

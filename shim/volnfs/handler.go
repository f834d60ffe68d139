package volnfs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/go-git/go-billy/v5"
	nfs "github.com/willscott/go-nfs"
	nfshelper "github.com/willscott/go-nfs/helpers"
)

// handleCacheSize bounds the file handles a Server remembers (an LRU):
// enough for a guest's working set, small enough that a guest walking a
// huge tree cannot grow the shim's memory. See the package doc for why
// handles need not outlive the Server.
const handleCacheSize = 4096

// exportsHandler answers MOUNT for the configured exports and gives
// go-nfs each export's rootFS.
type exportsHandler struct {
	exports map[string]*rootFS
}

// newHandler wraps the exports in go-nfs's caching handler, which maps
// handles to (export, path) in a bounded LRU.
func newHandler(exports map[string]*rootFS) (nfs.Handler, error) {
	ch, ok := nfshelper.NewCachingHandler(&exportsHandler{exports: exports}, handleCacheSize).(*nfshelper.CachingHandler)
	if !ok {
		return nil, errors.New("volnfs: go-nfs's caching handler is not a *helpers.CachingHandler")
	}
	return handles{ch}, nil
}

// Mount gives the export asked for as exactly "/<Name>" or "<Name>";
// anything else (a subdirectory, "/", another sandbox's name) is refused.
func (h *exportsHandler) Mount(_ context.Context, _ net.Conn, req nfs.MountRequest) (nfs.MountStatus, billy.Filesystem, []nfs.AuthFlavor) {
	e, ok := h.exports[strings.TrimPrefix(string(req.Dirpath), "/")]
	if !ok {
		return nfs.MountStatusErrNoEnt, nil, nil
	}
	// AUTH_SYS is what the guest's kernel uses by default (sec=sys); the
	// credentials it carries are not trusted for anything (see doc.go).
	return nfs.MountStatusOk, e, []nfs.AuthFlavor{nfs.AuthFlavorUnix}
}

// Change lets go-nfs chmod, chown and set times through the rootFS's
// checks. rootFS is not an nfs.UnixChange: no MKNOD (device nodes on a
// host directory), and go-nfs v0.0.4 misparses LINK's arguments, so hard
// links are refused rather than half-done.
func (h *exportsHandler) Change(f billy.Filesystem) billy.Change {
	if r, ok := f.(*rootFS); ok {
		return r
	}
	return nil
}

// FSStat reports the real size and free space of the filesystem holding
// the export, so the guest's df and free-space checks see the truth
// rather than go-nfs's 2^62 defaults.
func (h *exportsHandler) FSStat(_ context.Context, f billy.Filesystem, s *nfs.FSStat) error {
	r, ok := f.(*rootFS)
	if !ok {
		return fmt.Errorf("volnfs: FSSTAT on a foreign filesystem %T", f)
	}
	st, err := r.statfs()
	if err != nil {
		return err
	}
	bs := uint64(st.Frsize)
	if bs == 0 {
		bs = uint64(st.Bsize)
	}
	s.TotalSize, s.FreeSize, s.AvailableSize = st.Blocks*bs, st.Bfree*bs, st.Bavail*bs
	s.TotalFiles, s.FreeFiles, s.AvailableFiles = st.Files, st.Ffree, st.Ffree
	return nil
}

// The handle methods are the caching handler's; these are never called.

func (h *exportsHandler) ToHandle(billy.Filesystem, []string) []byte { return nil }

func (h *exportsHandler) FromHandle([]byte) (billy.Filesystem, []string, error) {
	return nil, nil, &nfs.NFSStatusError{NFSStatus: nfs.NFSStatusStale}
}

func (h *exportsHandler) InvalidateHandle(billy.Filesystem, []byte) error { return nil }

func (h *exportsHandler) HandleLimit() int { return handleCacheSize }

// handles is go-nfs's caching handler with one fix: go-nfs's MOUNT asks
// for a root handle even when Mount refused (a nil filesystem), which the
// caching handler dereferences. Without this a guest mounting an unknown
// name would crash the shim.
type handles struct {
	*nfshelper.CachingHandler
}

func (h handles) ToHandle(f billy.Filesystem, p []string) []byte {
	if f == nil {
		return nil
	}
	return h.CachingHandler.ToHandle(f, p)
}

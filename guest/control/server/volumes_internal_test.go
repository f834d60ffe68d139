package server

import (
	"testing"

	"github.com/moby/sys/mountinfo"
)

// TestSnapshotFlushSkipsNetworkFilesystems: the mounts a snapshot flushes
// are the local ones; NFS (a volume) and the other network filesystems,
// whose server may not answer, are left out.
func TestSnapshotFlushSkipsNetworkFilesystems(t *testing.T) {
	for fs, skipped := range map[string]bool{"nfs": true, "nfs4": true, "cifs": true, "smb3": true,
		"ext4": false, "overlay": false, "tmpfs": false, "erofs": false} {
		if skip, stop := localFS(&mountinfo.Info{FSType: fs, Mountpoint: "/m"}); skip != skipped || stop {
			t.Errorf("%s: skipped %v, want %v", fs, skip, skipped)
		}
	}
	syncLocal() // the host's own mounts: returns
}

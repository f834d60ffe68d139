package server

import "testing"

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		"/":                   "/",
		`/mnt/my\040volume`:   "/mnt/my volume",
		`/a\011b\134c`:        "/a\tb\\c",
		`/trailing\04`:        `/trailing\04`,
		`/not\999octal`:       `/not\999octal`,
		"/plain/path/is/kept": "/plain/path/is/kept",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSyncLocalSkipsNetworkFilesystems: the types a snapshot never waits
// on are NFS's (a volume) and the other network filesystems.
func TestSyncLocalSkipsNetworkFilesystems(t *testing.T) {
	for _, fs := range []string{"nfs", "nfs4", "cifs", "smb3"} {
		if !networkFS[fs] {
			t.Errorf("%s is synced before a snapshot", fs)
		}
	}
	for _, fs := range []string{"ext4", "overlay", "tmpfs", "erofs"} {
		if networkFS[fs] {
			t.Errorf("%s is not synced before a snapshot", fs)
		}
	}
	syncLocal() // the host's own mounts: returns
}

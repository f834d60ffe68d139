// Package volnfs is the per-sandbox NFSv3 server through which a sandbox's
// shim serves the sandbox's E2B volumes to its microVM.
//
// The guest kernel mounts each volume with mount(2) type "nfs", source
// "169.254.53.53:/<export>" and options such as
// vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,mountvers=3,
// nolock,hard,sync,noac,lookupcache=none. MOUNT and NFS are answered on the
// one TCP listener the shim hands to Serve; there is no portmapper (the
// guest names both ports) and no NLM (the guest mounts with nolock, so
// locks stay local to the VM).
//
// # Trust model
//
// The guest is hostile: it is root in its VM and can send any RPC with
// any AUTH_SYS credentials, any file handle and any file name. What
// confines it:
//
//   - The listener is the sandbox's own: the shim creates it in the pod's
//     network namespace (this package knows nothing of netns), so the only
//     client that can reach it is that sandbox's VM.
//   - The exports are the sandbox's own: a Server is made per sandbox with
//     exactly its volumes, and MOUNT answers only an exact "/<Name>" (or
//     "<Name>") of one of them.
//   - Every file access goes through the export's *os.Root: no name, ".."
//     or symlink, even one the guest planted itself, resolves outside the
//     export's directory. Symlinks are stored as the guest wrote them (the
//     guest's kernel follows them in the guest's namespace); the server
//     never follows one out. Only regular files and directories are ever
//     opened, and the guest cannot make device nodes or FIFOs (no MKNOD),
//     so a device file is never opened on the host's behalf.
//   - Ownership: the shim runs as root, so every file the server makes
//     would be root's. Instead each file, directory and symlink the guest
//     creates is given the Export's UID and GID, a chown to any other
//     owner is refused (EPERM, like nfsd's all_squash), and the setuid and
//     setgid bits are stripped from every create and chmod. The guest
//     thus cannot leave a root-owned or setuid file on a volume that the
//     host or another sandbox later uses. Attributes report each file's
//     real owner, so in the guest the files show as owned by the Export's
//     UID: a guest user whose uid differs can read and write them (ACCESS
//     grants what is asked) but its kernel refuses it chmod and utimes on
//     them, as for any file it does not own.
//
// # File handles
//
// Handles are random IDs kept in a bounded LRU (go-nfs's caching handler,
// handleCacheSize entries) mapping to an export and a path. They are valid
// only for this Server's lifetime and, past the bound, only while recently
// used. That is enough: the guest remounts its volumes after every restore
// (the lifecycle remount E2B uses), so a handle never has to survive a move
// of the sandbox to another shim or node, and a stale handle then gets
// ESTALE, which the remount clears. Because a handle names a path, a file
// renamed (or its directory renamed) while the guest holds it open goes
// stale too.
//
// # Durability
//
// go-nfs answers every WRITE as FILE_SYNC and COMMIT as a no-op, but
// writes only reach the host's page cache: data the guest believes stable
// is lost if the host crashes before writeback. The guest's sync/fsync do
// not change that.
package volnfs

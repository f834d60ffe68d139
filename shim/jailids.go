package shim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/api/node"
)

// jailIDsDir holds one lock file per uid in use by a VM on the node, under
// the layout's root: every shim of the node (one per pod) claims from it.
const jailIDsDir = "vm-uids"

// uidClaim is a uid held for one pod's VMs (a rollback's restore keeps it).
type uidClaim struct {
	uid  int
	lock *os.File
}

// claimUID takes a free uid from r for the pod, starting at a spot the
// pod's UID picks (so concurrent shims rarely probe the same files). A
// uid is taken while a shim holds its file's flock: a shim that dies
// frees its uids with its fds.
func claimUID(root string, r node.IDRange, podUID string) (*uidClaim, error) {
	dir := filepath.Join(root, jailIDsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("vm uid locks: %w", err)
	}
	h := fnv.New32a()
	h.Write([]byte(podUID))
	start := int(h.Sum32() % uint32(r.Count))
	for i := range r.Count {
		uid := r.First + (start+i)%r.Count
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(uid)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("vm uid lock: %w", err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &uidClaim{uid: uid, lock: f}, nil
		}
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("vm uid lock %d: %w", uid, err)
		}
	}
	return nil, fmt.Errorf("all %d vm uids from %d are in use on this node", r.Count, r.First)
}

// release frees the uid. The file stays: removing it could race another
// shim that just opened it and is about to lock it.
func (c *uidClaim) release() {
	if c != nil && c.lock != nil {
		c.lock.Close()
		c.lock = nil
	}
}

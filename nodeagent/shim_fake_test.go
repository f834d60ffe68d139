package nodeagent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/nodeagent"
)

// fakeShims stands in for the shims of the test's node behind the
// agent's dialer seam: one fake VM per pod UID (test/agent covers the
// real sockets and shim). A pod without one has no shim to dial.
type fakeShims struct {
	mu  sync.Mutex
	vms map[string]*fakeVM
}

var _ nodeagent.ControlDialer = (*fakeShims)(nil)

// vm is the fake VM of a pod, made in state on first use.
func (s *fakeShims) vm(uid types.UID, state string) *fakeVM {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vms == nil {
		s.vms = map[string]*fakeVM{}
	}
	v := s.vms[string(uid)]
	if v == nil {
		v = &fakeVM{state: state}
		s.vms[string(uid)] = v
	}
	return v
}

func (s *fakeShims) Dial(ctx context.Context, podUID string) (nodeagent.Control, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.vms[podUID]
	if v == nil {
		return nil, fmt.Errorf("control API of pod %s: no shim", podUID)
	}
	return v, nil
}

// fakeVM answers the control API as a shim would, records what it was
// asked, and fails the calls the test sets an error for.
type fakeVM struct {
	mu         sync.Mutex
	state      string // "Running", "Paused"
	guestAgent string // the guest agent's version the shim reports
	// Errors the next calls return (nil: they succeed).
	identityErr, snapshotErr, restoreErr error
	// What it was asked.
	resumes    int
	identities []*controlapi.SetIdentityRequest
	networks   []string // each SetNetwork
	ingress    []string // the last SetNetwork's
	snapshots  []string
	restores   []string
	restoreIDs []string // each restore's request ID
}

var _ nodeagent.Control = (*fakeVM)(nil)

// set changes the fake under its lock.
func (v *fakeVM) set(f func(*fakeVM)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f(v)
}

// calls is a copy of what the fake was asked.
func (v *fakeVM) calls() (resumes int, identities []*controlapi.SetIdentityRequest, snapshots, restores []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.resumes, append([]*controlapi.SetIdentityRequest(nil), v.identities...),
		append([]string(nil), v.snapshots...), append([]string(nil), v.restores...)
}

func (v *fakeVM) Close() error { return nil }

func (v *fakeVM) Pause(ctx context.Context, _ *controlapi.PauseRequest) (*controlapi.PauseResponse, error) {
	v.set(func(v *fakeVM) { v.state = "Paused" })
	return &controlapi.PauseResponse{}, nil
}

func (v *fakeVM) Resume(ctx context.Context, _ *controlapi.ResumeRequest) (*controlapi.ResumeResponse, error) {
	v.set(func(v *fakeVM) { v.state, v.resumes = "Running", v.resumes+1 })
	return &controlapi.ResumeResponse{}, nil
}

func (v *fakeVM) Stats(ctx context.Context, _ *controlapi.StatsRequest) (*controlapi.StatsResponse, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return &controlapi.StatsResponse{State: v.state, QemuPid: 4242, Accel: "tcg", PssBytes: 40 << 20, PrivateBytes: 30 << 20,
		CpuNanos: 1_500_000_000, GuestAgent: v.guestAgent}, nil
}

func (v *fakeVM) SetIdentity(ctx context.Context, req *controlapi.SetIdentityRequest) (*controlapi.SetIdentityResponse, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.identityErr != nil {
		return nil, v.identityErr
	}
	v.identities = append(v.identities, req)
	return &controlapi.SetIdentityResponse{}, nil
}

func (v *fakeVM) SetNetwork(ctx context.Context, req *controlapi.SetNetworkRequest) (*controlapi.SetNetworkResponse, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.networks = append(v.networks, req.GetNetworkJson())
	v.ingress = req.GetIngressFrom()
	return &controlapi.SetNetworkResponse{}, nil
}

func (v *fakeVM) Snapshot(ctx context.Context, req *controlapi.SnapshotRequest) (*controlapi.SnapshotResponse, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.snapshotErr != nil {
		return nil, v.snapshotErr
	}
	if err := writeSnapshot(req.GetDir()); err != nil {
		return nil, err
	}
	v.snapshots = append(v.snapshots, req.GetDir())
	return &controlapi.SnapshotResponse{PausedNanos: int64(3 * time.Millisecond), TookNanos: int64(time.Second)}, nil
}

func (v *fakeVM) Restore(ctx context.Context, req *controlapi.RestoreRequest) (*controlapi.RestoreResponse, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.restoreErr != nil {
		return nil, v.restoreErr
	}
	v.restores = append(v.restores, req.GetDir())
	v.restoreIDs = append(v.restoreIDs, req.GetRequestId())
	if id := req.GetIdentity(); id != nil { // a claim's restore: the identity comes with it
		v.identities = append(v.identities, id)
	}
	v.state = "Running" // a restored VM runs
	return &controlapi.RestoreResponse{TookNanos: int64(20 * time.Millisecond)}, nil
}

// writeSnapshot writes what a shim's Snapshot leaves in dir: the data
// files and, last, a manifest whose checksums match them (snapshot.Verify
// passes), naming a base disk outside the store as the image cache's.
func writeSnapshot(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("fake snapshot dir: %w", err)
	}
	m := &snapshot.Manifest{Version: snapshot.ManifestVersion, Created: time.Now().UTC(), Accel: "tcg", QEMUVersion: "7.2.0",
		CPU: "fake-cpu", VCPU: 1, MemoryMiB: 256, DirtyBytes: 4096, PausedNanos: int64(3 * time.Millisecond),
		BaseDisk: snapshot.FileRef{Path: "/var/lib/sandlot/images/base.ext4", Size: 1 << 20, SHA256: strings.Repeat("ab", 32)}}
	for _, f := range []struct {
		ref  *snapshot.FileRef
		name string
	}{{&m.State, snapshot.StateFile}, {&m.Disk, snapshot.DiskFile}, {&m.Memory, snapshot.MemoryFile}} {
		data := []byte("fake " + f.name + " of a VM\n")
		if err := os.WriteFile(filepath.Join(dir, f.name), data, 0o600); err != nil {
			return fmt.Errorf("fake snapshot file: %w", err)
		}
		sum := sha256.Sum256(data)
		*f.ref = snapshot.FileRef{Path: f.name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	}
	return m.Write(dir)
}

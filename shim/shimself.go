package shim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// shimSelf is what the task service does to its own process (the node's
// in production; nil in unit tests: the test binary stays where it is).
type shimSelf interface {
	// Confine moves the shim into its own cgroup capped at maxMiB (0:
	// stays); what it cannot do it logs, and the pod runs on.
	Confine(ctx context.Context, id string, maxMiB int)
	// Release leaves and removes that cgroup, as the shim exits.
	Release(ctx context.Context)
	SetOOMScoreAdj(v int) error
}

// processSelf is the shim process's shimSelf.
type processSelf struct{}

// ownCgroup is the shim process's own cgroup, once it is in it.
var ownCgroup atomic.Pointer[shimCgroup]

// uncapped lifts the shim's memory cap for bulk I/O it does for its pod:
// call the returned func when it is done (see shimCgroup.lift).
func uncapped() func() { return ownCgroup.Load().lift() }

func (processSelf) Confine(ctx context.Context, id string, maxMiB int) {
	if maxMiB <= 0 || ownCgroup.Load() != nil {
		return
	}
	h, err := readMemHierarchy()
	var g *shimCgroup
	if err == nil {
		sweepShimCgroups(filepath.Join(h.mount, shimCgroupParent), id)
		g, err = newShimCgroup(h, shimCgroupParent, id, int64(maxMiB)<<20)
	}
	if err == nil {
		err = g.join(os.Getpid())
	}
	if err != nil {
		if g != nil {
			_ = removeCgroups([]string{g.dir})
		}
		log.G(ctx).WithError(err).Errorf("shim memory cap of %d MiB NOT applied: the shim stays in containerd's cgroup, uncapped", maxMiB)
		return
	}
	g.goLimit = true
	g.setGoLimit(true)
	ownCgroup.Store(g)
	logf(ctx, "shim memory capped at %d MiB: cgroup %s", maxMiB, g.dir)
}

func (processSelf) Release(ctx context.Context) {
	g := ownCgroup.Swap(nil)
	if g == nil {
		return
	}
	if err := g.leave(os.Getpid()); err != nil {
		log.G(ctx).WithError(err).Warn("leave the shim's cgroup")
	}
}

func (processSelf) SetOOMScoreAdj(v int) error { return setOOMScoreAdj(os.Getpid(), v) }

func setOOMScoreAdj(pid, v int) error {
	p := fmt.Sprintf("/proc/%d/oom_score_adj", pid)
	if err := os.WriteFile(p, []byte(strconv.Itoa(v)), 0); err != nil {
		return fmt.Errorf("oom_score_adj %d: %w", v, err)
	}
	return nil
}

// staleShimCgroup: an empty shim cgroup this old is a leftover (a shim
// that could not leave it); a newer one may be a shim's about to be joined.
const staleShimCgroup = time.Minute

// sweepShimCgroups removes leftovers in parent: the kernel removes only
// empty cgroups, so a live shim's stays.
func sweepShimCgroups(parent, self string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !e.IsDir() || e.Name() == self || time.Since(fi.ModTime()) < staleShimCgroup {
			continue
		}
		_ = unix.Rmdir(filepath.Join(parent, e.Name()))
	}
}

// removeShimCgroup removes the cgroup of the shim of sandbox id after it
// died (containerd's `shim delete`).
func removeShimCgroup(id string) error {
	if id == "" || filepath.Base(id) != id {
		return nil
	}
	h, err := readMemHierarchy()
	if err != nil {
		return nil // no memory hierarchy: no shim cgroup either
	}
	return removeCgroups([]string{filepath.Join(h.mount, shimCgroupParent, id)})
}

// confine caps the shim's own memory, as soon as it knows its pod (the
// pause container's Create: the VM does not exist yet).
func (s *service) confine(ctx context.Context, r *taskAPI.CreateTaskRequest, spec *specs.Spec) {
	if s.host.self == nil {
		return
	}
	maxMiB, err := loadShimMemoryMaxMiB(r.Options)
	if err != nil {
		log.G(ctx).WithError(err).Warnf("sandlot shim config: shim memory cap %d MiB", maxMiB)
	}
	if maxMiB > 0 && (spec.Linux == nil || spec.Linux.CgroupsPath == "") {
		// QEMU joins the pod's cgroup; without one it would inherit the cap.
		log.G(ctx).Errorf("shim memory cap of %d MiB NOT applied: pod sandbox %s has no cgroupsPath", maxMiB, r.ID)
		return
	}
	s.host.self.Confine(ctx, r.ID, maxMiB)
}

// adoptOOMScore gives the shim its pod's OOM score instead of
// containerd's: the app container's, which the kubelet sets by the pod's
// QoS class (the pause container's is CRI's fixed -998).
func (s *service) adoptOOMScore(ctx context.Context, spec *specs.Spec) {
	if s.host.self == nil || spec.Process == nil || spec.Process.OOMScoreAdj == nil {
		return
	}
	if err := s.host.self.SetOOMScoreAdj(*spec.Process.OOMScoreAdj); err != nil {
		log.G(ctx).WithError(err).Warn("the shim keeps containerd's OOM score")
	}
}

// unconfine leaves the shim's cgroup as it exits.
func (s *service) unconfine(ctx context.Context) {
	if s.host.self != nil {
		s.host.self.Release(ctx)
	}
}

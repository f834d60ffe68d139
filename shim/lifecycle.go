package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/guest/control"
)

// createApp starts the pod's VM for its app container: restored from the
// snapshot the pod's annotations name, else cold-booted from the image.
func (s *service) createApp(ctx context.Context, r *taskAPI.CreateTaskRequest, spec *specs.Spec, std stdio) (*container, error) {
	s.mu.Lock()
	p, ok := s.pods[spec.Annotations[annSandboxID]]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: pod sandbox %s of container %s is not served by this shim", errdefs.ErrFailedPrecondition, spec.Annotations[annSandboxID], r.ID)
	}
	cfg, err := loadConfig(r.Options)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrFailedPrecondition, err)
	}
	p.cfg = cfg
	s.adoptOOMScore(ctx, spec)
	if spec.Process != nil && spec.Process.OOMScoreAdj != nil {
		// QEMU is the app container's process: its score, not the pause
		// container's (CRI's -998, which the node's OOM killer skips).
		p.oomScoreAdj = spec.Process.OOMScoreAdj
	}
	vs, adopt, err := s.vmSpec(ctx, r, spec, cfg)
	if vs.release != nil {
		defer vs.release() // the VM has mapped its data (or failed) by then
	}
	if err != nil {
		return nil, err
	}
	c := &container{id: r.ID, bundle: r.Bundle, pod: p, spec: spec, execs: map[string]*process{}, adoptPID: adopt}
	c.init = newProcess("", std, s.exitHandler(c))
	if err := p.start(ctx, vs, &controlAPI{s: s, pod: p}); err != nil {
		return nil, err
	}
	if err := writeCleanup(r.Bundle, p.cleanupRecord()); err != nil {
		_ = p.stop()
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.containers[r.ID] = c
	return c, nil
}

// vmSpec validates what the container asks for and sizes the VM.
func (s *service) vmSpec(ctx context.Context, r *taskAPI.CreateTaskRequest, spec *specs.Spec, cfg node.Config) (vmSpec, int, error) {
	ann := spec.Annotations
	if spec.Process == nil || len(spec.Process.Args) == 0 {
		return vmSpec{}, 0, fmt.Errorf("%w: image %s has no entrypoint or command, and the container gives none", errdefs.ErrInvalidArgument, ann[annImageName])
	}
	req, err := parseVMRequest(ann, limitsOf(spec), cfg, memTotalMiB())
	if err != nil {
		return vmSpec{}, 0, err
	}
	vs := vmSpec{VCPU: req.VCPU, MemoryMiB: req.MemoryMiB, LayerMiB: req.LayerMiB, ImageName: ann[annImageName],
		Env: envMap(spec.Process.Env), Pool: req.Pool, Slot: req.Slot, Network: req.Network,
		EgressSecrets: egressSecretsOf(spec)}
	if vs.DNS, err = resolvConfOf(spec); err != nil {
		return vmSpec{}, 0, err
	}
	if vs.Volumes, err = volumesOf(req.Volumes, ann[annSandboxNS], cfg.VolumeDir); err != nil {
		return vmSpec{}, 0, err
	}
	if vs.ImageDigest, err = s.host.digest(ctx, vs.ImageName); err != nil {
		return vmSpec{}, 0, fmt.Errorf("%w: %w", errdefs.ErrFailedPrecondition, err)
	}
	if req.Restore != nil {
		loc := req.Restore.Location
		if cfg.AgentSocket != "" {
			sr := stageapi.StageRequest{Kind: req.Restore.Kind, UID: req.Restore.UID,
				PodNamespace: ann[annSandboxNS], PodName: ann[annSandboxName], PodUID: ann[annSandboxUID]}
			if loc, vs.StoreRoot, vs.release, err = stage(ctx, cfg.AgentSocket, sr); err != nil {
				return vs, 0, err
			}
		}
		adopt, err := s.restoreSource(loc, vs.ImageDigest, cfg)
		vs.Restore, vs.Reboot = loc, req.Restore.Boot
		if vs.Reboot {
			adopt = 0 // a fresh boot: the entrypoint starts again, nothing to adopt
		}
		return vs, adopt, err
	}
	if vs.Slot {
		return vs, 0, nil // the claim's restore brings its own disk
	}
	vs.BaseDisk, err = baseDisk(ctx, cfg.ImageDir, vs.ImageDigest, r.Rootfs, filepath.Join(r.Bundle, "rootfs"))
	return vs, 0, err
}

// stageTimeout bounds a download of the data by the node agent.
const stageTimeout = 5 * time.Minute

// stage asks the node agent for the pod's restore data on this node. It
// never falls back to the annotated location: on another node that path
// names the origin's copy, which this node must not read.
func stage(ctx context.Context, socket string, req stageapi.StageRequest) (dir, storeRoot string, release func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, stageTimeout)
	defer cancel()
	c := stageapi.NewClient(socket)
	resp, err := stageWaitingForAgent(ctx, c, req)
	switch {
	case errors.Is(err, stageapi.ErrNotFound):
		return "", "", nil, fmt.Errorf("%w: restore %s %s: %w", errdefs.ErrNotFound, req.Kind, req.UID, err)
	case errors.Is(err, stageapi.ErrNotReady):
		return "", "", nil, fmt.Errorf("%w: restore %s %s: %w", errdefs.ErrUnavailable, req.Kind, req.UID, err)
	case errors.Is(err, stageapi.ErrIntegrityCheckFailed), errors.Is(err, stageapi.ErrManifestRejected):
		// The data was tampered with (or is broken): no retry fixes it.
		return "", "", nil, fmt.Errorf("%w: restore %s %s: %w", errdefs.ErrFailedPrecondition, req.Kind, req.UID, err)
	case errors.Is(err, stageapi.ErrRefused):
		return "", "", nil, fmt.Errorf("%w: restore %s %s: %w", errdefs.ErrPermissionDenied, req.Kind, req.UID, err)
	case err != nil:
		return "", "", nil, fmt.Errorf("%w: restore %s %s: ask the node agent at %s: %w", errdefs.ErrUnavailable, req.Kind, req.UID, socket, err)
	}
	release = func() { _ = c.Release(context.Background(), resp.Token) }
	return resp.Dir, resp.StoreRoot, release, nil
}

// agentWait bounds how long a restore waits for a node agent that is not
// listening (restarting: a DaemonSet's pod being replaced).
const agentWait = 90 * time.Second

// stageWaitingForAgent asks the agent, again while its socket is missing
// or refuses connections or the agent went away mid-request, so a restore
// during an agent restart waits for it instead of failing the pod. A
// stage is safe to ask again: what the dead agent pinned went with it.
func stageWaitingForAgent(ctx context.Context, c *stageapi.Client, req stageapi.StageRequest) (stageapi.StageResponse, error) {
	deadline := time.Now().Add(agentWait)
	for {
		resp, err := c.Stage(ctx, req)
		if err == nil || !agentGone(err) || time.Now().After(deadline) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return resp, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// agentGone: nothing listens on the agent's socket, the agent closed the
// connection before it answered (killed mid-request), or it answered that
// it is stopping.
func agentGone(err error) bool {
	return errors.Is(err, stageapi.ErrStopping) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// restoreSource checks a snapshot can start this container: it exists
// here, and was taken from the same image. It returns the guest PID of
// the snapshot's app process.
func (s *service) restoreSource(dir, digest string, cfg node.Config) (int, error) {
	if !filepath.IsAbs(dir) {
		return 0, fmt.Errorf("%w: snapshot location %q is not a directory on this node", errdefs.ErrInvalidArgument, dir)
	}
	m, err := snapshot.ReadManifest(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("%w: unknown snapshot: %w", errdefs.ErrNotFound, err)
		}
		return 0, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	if err := s.host.vms.Compatible(m, cfg); err != nil {
		return 0, fmt.Errorf("%w: snapshot %s: %w", errdefs.ErrFailedPrecondition, dir, err)
	}
	if got := m.Labels[labelImageDigest]; got != digest {
		return 0, fmt.Errorf("%w: snapshot %s was taken from image %s (%s), the container's image is %s",
			errdefs.ErrFailedPrecondition, dir, m.Labels[labelImageName], got, digest)
	}
	pid, _ := strconv.Atoi(m.Labels[labelInitPID])
	return pid, nil
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// start runs a process: nothing for the pause container; in the VM for
// the app container (its init adopts a restored VM's process). A failed
// start leaves the process created, to be started again.
func (s *service) start(ctx context.Context, c *container, p *process) error {
	if c.sandbox && p.id != "" {
		return fmt.Errorf("%w: exec in a pause container", errdefs.ErrNotImplemented)
	}
	if err := p.beginStart(); err != nil {
		return err
	}
	if c.sandbox || (p.id == "" && c.pod.empty()) {
		return p.runNothing() // a start slot's app follows the VM a claim restores
	}
	err := s.startInVM(ctx, c, p)
	if err != nil {
		p.abortStart()
	}
	return err
}

func (s *service) startInVM(ctx context.Context, c *container, p *process) error {
	g, err := c.pod.guest()
	if err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrFailedPrecondition, err)
	}
	if p.id == "" && c.adoptPID > 0 {
		c.pod.setLabel(labelInitPID, strconv.Itoa(c.adoptPID))
		return p.run(ctx, g, g.Follow(c.adoptPID))
	}
	spec := c.spec.Process
	if p.id != "" {
		spec = p.spec
	}
	params, err := startParams(spec, p.stdio.Terminal)
	if err != nil {
		return err
	}
	params.Log = p.id == "" // the container's own log takes the guest's log FIFO
	gp, err := g.Start(ctx, params)
	if err != nil {
		return fmt.Errorf("start %v in the VM: %w", params.Args, err)
	}
	if p.id == "" {
		c.pod.setLabel(labelInitPID, strconv.Itoa(gp.PID))
	}
	if err := p.run(ctx, g, gp); err != nil {
		// Killed while starting, or its FIFOs failed: nobody follows it,
		// so it must not run on unseen.
		_ = g.SignalGroup(context.WithoutCancel(ctx), gp.PID, int(syscall.SIGKILL))
		return err
	}
	return nil
}

func startParams(spec *specs.Process, terminal bool) (control.StartParams, error) {
	if spec == nil || len(spec.Args) == 0 {
		return control.StartParams{}, fmt.Errorf("%w: no command", errdefs.ErrInvalidArgument)
	}
	uid, gid := spec.User.UID, spec.User.GID
	sp := control.StartParams{Args: spec.Args, Env: spec.Env, Cwd: spec.Cwd, UID: &uid, GID: &gid, Terminal: terminal}
	if spec.ConsoleSize != nil {
		sp.Cols, sp.Rows = uint16(spec.ConsoleSize.Width), uint16(spec.ConsoleSize.Height)
	}
	return sp, nil
}

// kill signals a process. The pause container's (which runs nothing)
// exits at once.
func (s *service) kill(ctx context.Context, c *container, p *process, sig int) error {
	pid, st, _, _ := p.snapshot()
	switch {
	case st == procStopped:
		return fmt.Errorf("process already finished: %w", errdefs.ErrNotFound)
	case c.sandbox || st == procCreated || st == procStarting:
		p.exited(128 + uint32(sig))
		return nil
	}
	if p == c.init && sig == int(syscall.SIGKILL) {
		// SIGKILL to the app is the end of the VM: stopped from the host,
		// not asked of a guest that may not answer (stalled, or hostile).
		p.exited(128 + uint32(sig)) // its exit handler stops the VM
		return nil
	}
	if c.pod.paused() {
		// A paused guest answers nothing (a warm pool VM waiting for its
		// claim): a signal to the app ends the VM as its exit would; an
		// exec's waits for a resume.
		if p != c.init {
			return fmt.Errorf("%w: the VM is paused", errdefs.ErrFailedPrecondition)
		}
		p.exited(128 + uint32(sig)) // its exit handler stops the VM
		return nil
	}
	g, err := c.pod.guest()
	if err != nil {
		p.exited(exitVMGone)
		return nil
	}
	err = g.SignalGroup(ctx, pid, sig)
	if err == nil || errors.Is(err, &control.Error{Code: control.CodeNotFound}) {
		return nil
	}
	// The signal killed the app, whose exit stopped the VM before the
	// guest's reply arrived.
	if p.wait(waitBriefly(ctx)) == nil {
		return nil
	}
	return fmt.Errorf("signal %d to guest process %d: %w", sig, pid, err)
}

// waitBriefly bounds a wait for an exit that is already under way.
func waitBriefly(ctx context.Context) context.Context {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	context.AfterFunc(ctx, cancel)
	return ctx
}

// delete removes an exec, or a container: the app container's VM stops
// and the pod's network is given back.
func (s *service) delete(ctx context.Context, c *container, p *process) error {
	if p.id != "" {
		if p.running() {
			return fmt.Errorf("%w: exec %s is still running", errdefs.ErrFailedPrecondition, p.id)
		}
		s.mu.Lock()
		delete(c.execs, p.id)
		s.mu.Unlock()
		return nil
	}
	var err error
	if !c.sandbox {
		err = c.pod.stop()
		_ = os.Remove(filepath.Join(c.bundle, cleanupFile))
	}
	if !p.running() {
		p.exited(exitVMGone) // no-op when it exited already
	}
	s.mu.Lock()
	delete(s.containers, c.id)
	if c.sandbox {
		delete(s.pods, c.id)
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("stop the VM of %s: %w", c.id, err)
	}
	return nil
}

// guestCall runs fn on a running app process's guest PID; a process that
// does not run (or the pause container's) has nothing to act on.
func (s *service) guestCall(c *container, p *process, fn func(pid int, g guest) error) error {
	pid, st, _, _ := p.snapshot()
	if c.sandbox || !st.live() {
		return nil
	}
	g, err := c.pod.guest()
	if err != nil {
		return err
	}
	return fn(pid, g)
}

// restoreInPlace replaces a pod's VM with a restore of one of the pod's
// snapshots (rollback), or of the data a sandbox that claimed the pod (a
// warm pool's) restores: same pod, network and control socket. The app
// container's init follows the snapshot's process; execs end. An order
// carrying the request ID the VM was last restored by is done already.
func (s *service) restoreInPlace(ctx context.Context, p *pod, o restoreOrder) error {
	c := s.appOf(p)
	if c == nil {
		return fmt.Errorf("%w: the pod has no app container", errdefs.ErrFailedPrecondition)
	}
	if o.requestID != "" && p.restoredBy() == o.requestID {
		return nil
	}
	adopt, err := s.restoreSource(o.dir, p.label(labelImageDigest), p.cfg)
	if err != nil {
		return err
	}
	c.init.detach()
	for _, e := range s.execsOf(c) {
		e.exited(exitVMGone) // the snapshot does not know them
	}
	g, err := p.replace(ctx, o)
	if err == nil && adopt > 0 {
		// The new VM's snapshots name the process the app follows now: a
		// start slot's pod never started one, and a clone restored from a
		// snapshot without it would have nothing to follow.
		p.setLabel(labelInitPID, strconv.Itoa(adopt))
		err = c.init.run(ctx, g, g.Follow(adopt))
	}
	if err != nil || adopt == 0 {
		c.init.exited(exitVMGone)
	}
	if err != nil {
		return err
	}
	return writeCleanup(c.bundle, p.cleanupRecord())
}

func (s *service) execsOf(c *container) []*process {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*process, 0, len(c.execs))
	for _, e := range c.execs {
		out = append(out, e)
	}
	return out
}

func (s *service) appOf(p *pod) *container {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.containers {
		if !c.sandbox && c.pod == p {
			return c
		}
	}
	return nil
}

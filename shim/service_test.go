package shim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"

	"github.com/sandlot-dev/sandlot/api/snapshot"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/vm"
)

// TestPauseContainer: the pause container runs nothing and boots no VM;
// its task still goes through created, running and stopped.
func TestPauseContainer(t *testing.T) {
	h := newHarness(t)
	pid := h.mustCreate(testPod, pauseSpec())
	if pid != uint32(os.Getpid()) {
		t.Fatalf("pid %d, want the shim's %d", pid, os.Getpid())
	}
	if e := event[*eventstypes.TaskCreate](h); e.ContainerID != testPod || e.Pid != pid {
		t.Fatalf("create event %+v", e)
	}
	if st := h.state(testPod, ""); st.Status != task.Status_CREATED || st.Pid != pid {
		t.Fatalf("state %v pid %d, want CREATED", st.Status, st.Pid)
	}
	if _, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testPod}); err != nil {
		t.Fatal(err)
	}
	event[*eventstypes.TaskStart](h)
	if st := h.state(testPod, ""); st.Status != task.Status_RUNNING {
		t.Fatalf("state %v, want RUNNING", st.Status)
	}
	if _, err := h.s.Kill(h.ctx, &taskAPI.KillRequest{ID: testPod, Signal: 15}); err != nil {
		t.Fatal(err)
	}
	if e := event[*eventstypes.TaskExit](h); e.ContainerID != testPod || e.ID != testPod || e.ExitStatus != 143 {
		t.Fatalf("exit event %+v", e)
	}
	if w := h.wait(testPod, ""); w.ExitStatus != 143 {
		t.Fatalf("wait: exit %d, want 143", w.ExitStatus)
	}
	if st := h.state(testPod, ""); st.Status != task.Status_STOPPED || st.ExitStatus != 143 {
		t.Fatalf("state %v exit %d, want STOPPED 143", st.Status, st.ExitStatus)
	}
	del, err := h.s.Delete(h.ctx, &taskAPI.DeleteRequest{ID: testPod})
	if err != nil || del.ExitStatus != 143 {
		t.Fatalf("delete = %+v, %v", del, err)
	}
	event[*eventstypes.TaskDelete](h)
	_, err = h.s.State(h.ctx, &taskAPI.StateRequest{ID: testPod})
	wantCode(t, "state after delete", err, codes.NotFound)
	if h.vms.last() != nil {
		t.Fatal("the pause container booted a VM")
	}
}

// TestAppContainer: the app container boots the pod's VM on its pod's
// network, runs its command in the guest, and its exit stops the VM.
func TestAppContainer(t *testing.T) {
	h := newHarness(t)
	h.mustCreate(testPod, pauseSpec())
	pid := h.mustCreate(testApp, appSpec())
	m := h.vms.last()
	if m == nil || pid != uint32(m.pid) {
		t.Fatalf("create pid %d, want QEMU's (%+v)", pid, m)
	}
	h.wantBooted(m)
	c, _ := h.s.get(testApp)
	cleanup := filepath.Join(c.bundle, cleanupFile)
	if _, err := os.Stat(cleanup); err != nil {
		t.Fatalf("no cleanup record: %v", err)
	}
	if st := h.state(testApp, ""); st.Status != task.Status_CREATED || st.Pid != pid {
		t.Fatalf("state %v pid %d", st.Status, st.Pid)
	}
	if _, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp}); err != nil {
		t.Fatal(err)
	}
	started, _ := m.guest.snapshot()
	if len(started) != 1 || started[0].Args[1] != "app.py" || started[0].Cwd != "/app" || started[0].Env[0] != "A=1" {
		t.Fatalf("guest started %+v", started)
	}
	gpid := h.guestPID(testApp, "")
	if m.label(labelInitPID) != "101" || gpid != 101 {
		t.Fatalf("init pid %d, label %q", gpid, m.label(labelInitPID))
	}
	if st := h.state(testApp, ""); st.Status != task.Status_RUNNING {
		t.Fatalf("state %v, want RUNNING", st.Status)
	}
	h.drain()
	m.guest.exit(gpid, 3)
	if e := event[*eventstypes.TaskExit](h); e.ContainerID != testApp || e.ID != testApp || e.ExitStatus != 3 {
		t.Fatalf("exit event %+v", e)
	}
	if !m.stopped() || h.net.attached {
		t.Fatal("the app's exit left the VM or its tap")
	}
	if w := h.wait(testApp, ""); w.ExitStatus != 3 {
		t.Fatalf("wait: exit %d", w.ExitStatus)
	}
	if _, err := h.s.Delete(h.ctx, &taskAPI.DeleteRequest{ID: testApp}); err != nil {
		t.Fatal(err)
	}
	if e := event[*eventstypes.TaskDelete](h); e.ContainerID != testApp || e.ExitStatus != 3 {
		t.Fatalf("delete event %+v", e)
	}
	if _, err := os.Stat(cleanup); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cleanup record left: %v", err)
	}
}

// wantBooted: m was cold-booted as the pod's defaults and annotations
// say, with the pod's identity, on its network.
func (h *harness) wantBooted(m *fakeMachine) {
	h.t.Helper()
	want := vm.Config{Name: "pod-" + testUID, VCPU: 1, MemoryMiB: 512, LayerMiB: 1024,
		BaseDisk: filepath.Join(h.cfg.ImageDir, "sha256-0123456789abcdef.ext4"), Net: vm.NetSpec{MAC: fakePodNet.MAC, Tap: tapName}}
	got := m.cfg
	if got.Name != want.Name || got.VCPU != want.VCPU || got.MemoryMiB != want.MemoryMiB || got.LayerMiB != want.LayerMiB ||
		got.BaseDisk != want.BaseDisk || got.Net.MAC != want.Net.MAC || got.Net.Tap != want.Net.Tap || m.restoredFrom != "" {
		h.t.Fatalf("VM config %+v, want %+v", got, want)
	}
	if id := m.identity; id.Hostname != "sbx" || id.Network.Address != fakePodNet.Address || id.Env["A"] != "1" {
		h.t.Fatalf("identity %+v", id)
	}
	if m.label(labelImageDigest) != testDigest || m.label(labelImageName) != testImage {
		h.t.Fatalf("labels %v", m.labels)
	}
	if !h.net.attached || !h.net.gateOpen || m.announced != 1 {
		h.t.Fatalf("network attached %v, gate open %v, announced %d", h.net.attached, h.net.gateOpen, m.announced)
	}
}

// appEdit changes the app container's spec (or the harness) for a case.
type appEdit func(h *harness, s *specs.Spec)

func restoreFrom(dir func(h *harness) string) appEdit {
	return func(h *harness, s *specs.Spec) {
		s.Annotations[sandlotv1.AnnotationBoot] = sandlotv1.BootRestore
		s.Annotations[sandlotv1.AnnotationRestoreKind] = sandlotv1.RestoreKindSnapshot
		s.Annotations[sandlotv1.AnnotationRestoreUID] = "snap-uid"
		s.Annotations[sandlotv1.AnnotationRestoreLocation] = dir(h)
	}
}

// snapshotDir writes a snapshot manifest with labels.
func (h *harness) snapshotDir(labels map[string]string) string {
	h.t.Helper()
	dir := h.t.TempDir()
	if err := (&snapshot.Manifest{Version: snapshot.ManifestVersion, Labels: labels}).Write(dir); err != nil {
		h.t.Fatal(err)
	}
	return dir
}

func ofImage(h *harness) string {
	return h.snapshotDir(map[string]string{labelImageDigest: testDigest, labelInitPID: "42"})
}

// createCase is a Create refused: the pause container's, or the app's.
type createCase struct {
	name  string
	setup func(h *harness)
	pause func(s *specs.Spec)
	app   appEdit // nil: the pause container's Create is the one tested
	noPod bool
	code  codes.Code
}

// TestCreateErrors: each refusal is the errdefs code containerd maps to
// CRI, and a failed app Create leaves no VM, tap or container behind.
func TestCreateErrors(t *testing.T) {
	for _, tc := range []createCase{
		{name: "no container type", pause: func(s *specs.Spec) { delete(s.Annotations, annContainerType) }, code: codes.InvalidArgument},
		{name: "pod without UID", pause: func(s *specs.Spec) { delete(s.Annotations, annSandboxUID) }, code: codes.InvalidArgument},
		{name: "pod UID a path", pause: func(s *specs.Spec) { s.Annotations[annSandboxUID] = "../x" }, code: codes.InvalidArgument},
		{name: "pod config missing", setup: func(h *harness) { h.cfg.Kernel = "/nonexistent"; h.rewriteConfig() }, code: codes.FailedPrecondition},
		{name: "app of another pod", noPod: true, app: func(*harness, *specs.Spec) {}, code: codes.FailedPrecondition},
		{name: "app without command", app: func(_ *harness, s *specs.Spec) { s.Process.Args = nil }, code: codes.InvalidArgument},
		{name: "app image unknown", app: func(h *harness, _ *specs.Spec) { h.digest = "" }, code: codes.FailedPrecondition},
		{name: "app image digest not sha256", app: func(h *harness, _ *specs.Spec) { h.digest = "md5:x" }, code: codes.Unknown},
		{name: "app bad annotation", app: func(_ *harness, s *specs.Spec) { s.Annotations[sandlotv1.AnnotationVCPU] = "many" },
			code: codes.InvalidArgument},
		{name: "host network pod", pause: func(s *specs.Spec) { s.Linux = nil }, app: func(*harness, *specs.Spec) {}, code: codes.Unknown},
		{name: "netns unreadable", app: func(h *harness, _ *specs.Spec) { h.net.inspectErr = os.ErrPermission }, code: codes.Unknown},
		{name: "control socket taken", app: func(h *harness, _ *specs.Spec) {
			h.writeFile(filepath.Join(h.cfg.Layout().ControlSocket(testUID), "x"), "")
		}, code: codes.Unknown},
		{name: "VM boot fails", app: func(h *harness, _ *specs.Spec) { h.vms.bootErr = errors.New("no KVM") }, code: codes.Unknown},
		{name: "restore from a relative path", app: restoreFrom(func(*harness) string { return "snap" }), code: codes.InvalidArgument},
		{name: "restore of an unknown snapshot", app: restoreFrom(func(*harness) string { return "/nonexistent/snap" }), code: codes.NotFound},
		{name: "restore of another image", app: restoreFrom(func(h *harness) string {
			return h.snapshotDir(map[string]string{labelImageDigest: "sha256:other"})
		}), code: codes.FailedPrecondition},
		{name: "restore on an incompatible node", app: func(h *harness, s *specs.Spec) {
			h.vms.compatErr = errors.New("another CPU")
			restoreFrom(ofImage)(h, s)
		}, code: codes.FailedPrecondition},
		{name: "restore fails", app: func(h *harness, s *specs.Spec) {
			h.vms.restoreErr = errors.New("bad state")
			restoreFrom(ofImage)(h, s)
		}, code: codes.Unknown},
	} {
		t.Run(tc.name, tc.run)
	}
}

func (tc createCase) run(t *testing.T) {
	h := newHarness(t)
	ps := pauseSpec()
	if tc.pause != nil {
		tc.pause(ps)
	}
	if tc.app == nil {
		if tc.setup != nil {
			tc.setup(h)
		}
		_, err := h.create(testPod, ps)
		wantCode(t, "create", err, tc.code)
		return
	}
	if !tc.noPod {
		h.mustCreate(testPod, ps)
	}
	as := appSpec()
	tc.app(h, as)
	_, err := h.create(testApp, as)
	wantCode(t, "create", err, tc.code)
	h.wantNothingLeft(testApp)
}

// wantNothingLeft: a failed Create left no container, VM or tap.
func (h *harness) wantNothingLeft(id string) {
	h.t.Helper()
	if _, err := h.s.get(id); err == nil {
		h.t.Fatalf("container %s registered", id)
	}
	if m := h.vms.last(); m != nil && !m.stopped() {
		h.t.Fatal("a VM runs")
	}
	if attached, _, _ := h.net.state(); attached {
		h.t.Fatal("the tap is attached")
	}
	if _, err := os.Stat(h.cfg.Layout().PodDir(testUID)); !errors.Is(err, os.ErrNotExist) {
		h.t.Fatalf("pod directory left: %v", err)
	}
}

func (h *harness) rewriteConfig() {
	h.t.Helper()
	h.writeFile(filepath.Join(filepath.Dir(h.cfg.Root), "config.json"), mustJSON(h.t, h.cfg))
}

// TestRestoreCreate: a restored VM's app container adopts the snapshot's
// process instead of starting its entrypoint again.
func TestRestoreCreate(t *testing.T) {
	h := newHarness(t)
	h.mustCreate(testPod, pauseSpec())
	as := appSpec()
	restoreFrom(ofImage)(h, as)
	h.mustCreate(testApp, as)
	m := h.vms.last()
	if m.restoredFrom == "" || m.announced != 1 {
		t.Fatalf("VM restored from %q, announced %d", m.restoredFrom, m.announced)
	}
	if _, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp}); err != nil {
		t.Fatal(err)
	}
	if started, _ := m.guest.snapshot(); len(started) != 0 {
		t.Fatalf("started %+v in a restored VM", started)
	}
	if st := h.state(testApp, ""); st.Status != task.Status_RUNNING || h.guestPID(testApp, "") != 42 || m.label(labelInitPID) != "42" {
		t.Fatalf("state %v, guest pid %d, label %q", st.Status, h.guestPID(testApp, ""), m.label(labelInitPID))
	}
	m.guest.exit(42, 0)
	if w := h.wait(testApp, ""); w.ExitStatus != 0 {
		t.Fatalf("exit %d", w.ExitStatus)
	}
}

// TestRebootCreate: a boot on a pause package's disk (sandlot.dev/boot:
// disk) starts the entrypoint again instead of adopting the package's
// process, which the new boot does not have.
func TestRebootCreate(t *testing.T) {
	h := newHarness(t)
	h.mustCreate(testPod, pauseSpec())
	as := appSpec()
	restoreFrom(ofImage)(h, as)
	as.Annotations[sandlotv1.AnnotationBoot] = sandlotv1.BootDisk
	h.mustCreate(testApp, as)
	m := h.vms.last()
	if !m.rebooted || m.restoredFrom == "" {
		t.Fatalf("VM rebooted %v on %q", m.rebooted, m.restoredFrom)
	}
	if _, err := h.s.Start(h.ctx, &taskAPI.StartRequest{ID: testApp}); err != nil {
		t.Fatal(err)
	}
	if started, _ := m.guest.snapshot(); len(started) != 1 || m.label(labelInitPID) == "42" {
		t.Fatalf("started %+v, init pid label %q: the entrypoint must start again", started, m.label(labelInitPID))
	}
}

// TestPauseResumeStats: Pause and Resume act on the app container's VM,
// which State reports as PAUSED; the pause container has neither.
func TestPauseResumeStats(t *testing.T) {
	h := newHarness(t)
	m, _ := h.startedPod()
	if _, err := h.s.Pause(h.ctx, &taskAPI.PauseRequest{ID: testApp}); err != nil {
		t.Fatal(err)
	}
	event[*eventstypes.TaskPaused](h)
	if st := h.state(testApp, ""); st.Status != task.Status_PAUSED || m.State() != vm.Paused {
		t.Fatalf("state %v, VM %v", st.Status, m.State())
	}
	if st := h.state(testPod, ""); st.Status != task.Status_RUNNING {
		t.Fatalf("pause container %v, want RUNNING", st.Status)
	}
	if _, err := h.s.Resume(h.ctx, &taskAPI.ResumeRequest{ID: testApp}); err != nil {
		t.Fatal(err)
	}
	event[*eventstypes.TaskResumed](h)
	if st := h.state(testApp, ""); st.Status != task.Status_RUNNING {
		t.Fatalf("state %v, want RUNNING", st.Status)
	}
	stats, err := h.s.Stats(h.ctx, &taskAPI.StatsRequest{ID: testApp})
	if err != nil {
		t.Fatal(err)
	}
	v, err := typeurl.UnmarshalAny(stats.Stats)
	if mt, ok := v.(*v1.Metrics); err != nil || !ok || mt.Memory.Usage.Usage != 64<<20 || mt.CPU.Usage.Total != 1e9 {
		t.Fatalf("stats %v, %v", v, err)
	}
	_, err = h.s.Pause(h.ctx, &taskAPI.PauseRequest{ID: testPod})
	wantCode(t, "pause the pause container", err, codes.Unimplemented)
	_, err = h.s.Resume(h.ctx, &taskAPI.ResumeRequest{ID: testPod})
	wantCode(t, "resume the pause container", err, codes.Unimplemented)
	_, err = h.s.Stats(h.ctx, &taskAPI.StatsRequest{ID: testPod})
	wantCode(t, "stats of the pause container", err, codes.Unimplemented)
	_, err = h.s.Pause(h.ctx, &taskAPI.PauseRequest{ID: "nope"})
	wantCode(t, "pause unknown", err, codes.NotFound)
}

// TestTaskAPIMisc: the calls sandlot answers without the VM.
func TestTaskAPIMisc(t *testing.T) {
	h := newHarness(t)
	m, _ := h.startedPod()
	pids, err := h.s.Pids(h.ctx, &taskAPI.PidsRequest{ID: testApp})
	if err != nil || len(pids.Processes) != 1 || pids.Processes[0].Pid != uint32(m.pid) {
		t.Fatalf("pids %v, %v", pids, err)
	}
	conn, err := h.s.Connect(h.ctx, &taskAPI.ConnectRequest{ID: testApp})
	if err != nil || conn.ShimPid != uint32(os.Getpid()) || conn.TaskPid != uint32(m.pid) {
		t.Fatalf("connect %v, %v", conn, err)
	}
	_, err = h.s.Update(h.ctx, &taskAPI.UpdateTaskRequest{ID: testApp})
	wantCode(t, "update", err, codes.OK)
	_, err = h.s.Update(h.ctx, &taskAPI.UpdateTaskRequest{ID: "nope"})
	wantCode(t, "update unknown", err, codes.NotFound)
	_, err = h.s.Checkpoint(h.ctx, &taskAPI.CheckpointTaskRequest{ID: testApp})
	wantCode(t, "checkpoint", err, codes.Unimplemented)
	_, err = h.s.Pids(h.ctx, &taskAPI.PidsRequest{ID: "nope"})
	wantCode(t, "pids unknown", err, codes.NotFound)
	if _, err := h.s.Shutdown(h.ctx, &taskAPI.ShutdownRequest{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.s.shutdown.Done():
		t.Fatal("the shim shut down with containers left")
	default:
	}
}

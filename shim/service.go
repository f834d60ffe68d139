package shim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	eventstypes "github.com/containerd/containerd/api/events"
	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/core/runtime"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CRI annotations on every container's OCI spec.
const (
	annContainerType = "io.kubernetes.cri.container-type"
	annSandboxID     = "io.kubernetes.cri.sandbox-id"
	annSandboxUID    = "io.kubernetes.cri.sandbox-uid"
	annSandboxName   = "io.kubernetes.cri.sandbox-name"
	annSandboxNS     = "io.kubernetes.cri.sandbox-namespace"
	annImageName     = "io.kubernetes.cri.image-name"
)

var empty = &emptypb.Empty{}

// service is containerd's task API for the containers of one pod: the
// pause container holds the network namespace and runs nothing; the app
// container is the VM and its processes run inside it.
type service struct {
	shutdown shutdown.Service
	host     host
	events   chan any

	mu         sync.Mutex
	containers map[string]*container
	pods       map[string]*pod // by CRI sandbox ID
}

// container is one task: the pause container or the app container.
type container struct {
	id      string
	bundle  string
	sandbox bool
	pod     *pod
	spec    *specs.Spec
	init    *process
	execs   map[string]*process
	// adoptPID is the guest PID of a restored VM's app process, which the
	// container's init takes over instead of starting the entrypoint.
	adoptPID int
}

// NewTaskService is the task API of a shim process.
// address is containerd's gRPC address (to look images up).
func NewTaskService(ctx context.Context, publisher shim.Publisher, sd shutdown.Service, address string) (taskAPI.TTRPCTaskService, error) {
	s := newService(sd, realHost(address))
	go s.forward(ctx, publisher)
	return s, nil
}

// newService is the task service on h; its events wait on s.events for
// forward (or a test) to take them.
func newService(sd shutdown.Service, h host) *service {
	s := &service{shutdown: sd, host: h, events: make(chan any, 128),
		containers: map[string]*container{}, pods: map[string]*pod{}}
	sd.RegisterCallback(func(ctx context.Context) error {
		s.stopAll()
		s.unconfine(ctx) // last: the VMs' children are gone
		return nil
	})
	return s
}

// RegisterTTRPC registers the task API with the shim's ttrpc server.
func (s *service) RegisterTTRPC(server *ttrpc.Server) error {
	taskAPI.RegisterTTRPCTaskService(server, s)
	return nil
}

// forward publishes events in order.
func (s *service) forward(ctx context.Context, publisher shim.Publisher) {
	ctx = context.WithoutCancel(ctx)
	defer publisher.Close()
	for {
		select {
		case e := <-s.events:
			if err := publisher.Publish(ctx, runtime.GetTopic(e), e); err != nil {
				log.G(ctx).WithError(err).Error("publish event")
			}
		case <-s.shutdown.Done():
			return
		}
	}
}

func (s *service) send(e any) {
	select {
	case s.events <- e:
	case <-s.shutdown.Done():
	}
}

// stopAll stops every VM when the shim shuts down.
func (s *service) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pods {
		_ = p.stop()
	}
}

func (s *service) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (_ *taskAPI.CreateTaskResponse, err error) {
	spec, err := readSpec(r.Bundle)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	std := stdio{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal}
	var c *container
	switch spec.Annotations[annContainerType] {
	case "sandbox":
		c, err = s.createPause(ctx, r, spec, std)
	case "container":
		c, err = s.createApp(ctx, r, spec, std)
	default:
		err = fmt.Errorf("%w: container %s has no %s annotation: sandlot runs CRI pods", errdefs.ErrInvalidArgument, r.ID, annContainerType)
	}
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	pid := s.taskPID(c)
	s.send(&eventstypes.TaskCreate{ContainerID: r.ID, Bundle: r.Bundle, Rootfs: r.Rootfs, Pid: pid,
		IO: &eventstypes.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal}})
	return &taskAPI.CreateTaskResponse{Pid: pid}, nil
}

// createPause records the pod: its network namespace, hostname and UID.
func (s *service) createPause(ctx context.Context, r *taskAPI.CreateTaskRequest, spec *specs.Spec, std stdio) (*container, error) {
	cfg, err := loadConfig(r.Options)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrFailedPrecondition, err)
	}
	uid := spec.Annotations[annSandboxUID]
	if uid == "" || filepath.Base(uid) != uid {
		return nil, fmt.Errorf("%w: pod sandbox %s has no usable %s annotation", errdefs.ErrInvalidArgument, r.ID, annSandboxUID)
	}
	s.confine(ctx, r, spec)
	p := &pod{id: r.ID, uid: uid, netns: netnsPath(spec), hostname: spec.Hostname, cfg: cfg, host: s.host}
	if spec.Linux != nil {
		p.cgroupsPath = spec.Linux.CgroupsPath
	}
	if spec.Process != nil {
		p.oomScoreAdj = spec.Process.OOMScoreAdj
	}
	c := &container{id: r.ID, bundle: r.Bundle, sandbox: true, pod: p, spec: spec, execs: map[string]*process{}}
	c.init = newProcess("", std, s.exitHandler(c))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[r.ID] = p
	s.containers[r.ID] = c
	return c, nil
}

func netnsPath(spec *specs.Spec) string {
	if spec.Linux == nil {
		return ""
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			return ns.Path
		}
	}
	return ""
}

func readSpec(bundle string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("read OCI spec: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("parse OCI spec: %w", err)
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	return &spec, nil
}

// taskPID is the host process that stands for a task: the shim for the
// pause container (it runs nothing), QEMU for the app container.
func (s *service) taskPID(c *container) uint32 {
	if !c.sandbox {
		if pid := c.pod.qemuPID(); pid > 0 {
			return uint32(pid)
		}
	}
	return uint32(os.Getpid())
}

func (s *service) get(id string) (*container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	if !ok {
		return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

func (s *service) process(id, execID string) (*container, *process, error) {
	c, err := s.get(id)
	if err != nil {
		return nil, nil, err
	}
	if execID == "" {
		return c, c.init, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := c.execs[execID]
	if !ok {
		return nil, nil, fmt.Errorf("exec %s in %s: %w", execID, id, errdefs.ErrNotFound)
	}
	return c, p, nil
}

// exitHandler publishes a process's exit.
func (s *service) exitHandler(c *container) func(*process) {
	return func(p *process) {
		_, _, status, at := p.snapshot()
		id := p.id
		if id == "" {
			id = c.id
			if !c.sandbox {
				if status == exitVMGone && c.pod.vmOOMKilled() {
					// QEMU went over the pod's memory limit: the kubelet reports
					// the container OOMKilled, as for a runc container.
					s.send(&eventstypes.TaskOOM{ContainerID: c.id})
				}
				// The app process was the container: like a runc container's
				// init, its end ends everything else, so the VM stops.
				if err := c.pod.stop(); err != nil {
					log.L.WithError(err).Warnf("stop the VM of %s", c.id)
				}
			}
		}
		s.send(&eventstypes.TaskExit{ContainerID: c.id, ID: id, Pid: s.taskPID(c), ExitStatus: status, ExitedAt: timestamppb.New(at)})
	}
}

func (s *service) State(ctx context.Context, r *taskAPI.StateRequest) (*taskAPI.StateResponse, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	_, st, exit, at := p.snapshot()
	status := st.taskStatus()
	if status == task.Status_RUNNING && !c.sandbox && c.pod.paused() {
		status = task.Status_PAUSED
	}
	return &taskAPI.StateResponse{ID: r.ID, ExecID: r.ExecID, Bundle: c.bundle, Pid: s.taskPID(c), Status: status,
		Stdin: p.stdio.Stdin, Stdout: p.stdio.Stdout, Stderr: p.stdio.Stderr, Terminal: p.stdio.Terminal,
		ExitStatus: exit, ExitedAt: timestamppb.New(at)}, nil
}

func (s *service) Start(ctx context.Context, r *taskAPI.StartRequest) (*taskAPI.StartResponse, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if err := s.start(ctx, c, p); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	pid := s.taskPID(c)
	if r.ExecID == "" {
		s.send(&eventstypes.TaskStart{ContainerID: c.id, Pid: pid})
	} else {
		s.send(&eventstypes.TaskExecStarted{ContainerID: c.id, ExecID: r.ExecID, Pid: pid})
	}
	return &taskAPI.StartResponse{Pid: pid}, nil
}

func (s *service) Wait(ctx context.Context, r *taskAPI.WaitRequest) (*taskAPI.WaitResponse, error) {
	_, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if err := p.wait(ctx); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	_, _, exit, at := p.snapshot()
	return &taskAPI.WaitResponse{ExitStatus: exit, ExitedAt: timestamppb.New(at)}, nil
}

func (s *service) Kill(ctx context.Context, r *taskAPI.KillRequest) (*emptypb.Empty, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	return empty, errgrpc.ToGRPC(s.kill(ctx, c, p, int(r.Signal)))
}

func (s *service) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if err := s.delete(ctx, c, p); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	_, _, exit, at := p.snapshot()
	pid := s.taskPID(c)
	if r.ExecID == "" {
		s.send(&eventstypes.TaskDelete{ContainerID: c.id, Pid: pid, ExitStatus: exit, ExitedAt: timestamppb.New(at)})
	}
	return &taskAPI.DeleteResponse{Pid: pid, ExitStatus: exit, ExitedAt: timestamppb.New(at)}, nil
}

func (s *service) Exec(ctx context.Context, r *taskAPI.ExecProcessRequest) (*emptypb.Empty, error) {
	c, err := s.get(r.ID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if c.sandbox {
		return nil, errgrpc.ToGRPC(fmt.Errorf("%w: exec in the pause container of a sandlot pod", errdefs.ErrNotImplemented))
	}
	var spec specs.Process
	if err := json.Unmarshal(r.Spec.GetValue(), &spec); err != nil {
		return nil, errgrpc.ToGRPC(fmt.Errorf("%w: exec spec: %w", errdefs.ErrInvalidArgument, err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := c.execs[r.ExecID]; ok {
		return nil, errgrpc.ToGRPC(fmt.Errorf("exec %s: %w", r.ExecID, errdefs.ErrAlreadyExists))
	}
	p := newProcess(r.ExecID, stdio{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal}, s.exitHandler(c))
	p.spec = &spec
	c.execs[r.ExecID] = p
	s.send(&eventstypes.TaskExecAdded{ContainerID: c.id, ExecID: r.ExecID})
	return empty, nil
}

func (s *service) Pids(ctx context.Context, r *taskAPI.PidsRequest) (*taskAPI.PidsResponse, error) {
	c, err := s.get(r.ID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	return &taskAPI.PidsResponse{Processes: []*task.ProcessInfo{{Pid: s.taskPID(c)}}}, nil
}

func (s *service) Pause(ctx context.Context, r *taskAPI.PauseRequest) (*emptypb.Empty, error) {
	c, err := s.appContainer(r.ID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if err := c.pod.pause(ctx); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	s.send(&eventstypes.TaskPaused{ContainerID: r.ID})
	return empty, nil
}

func (s *service) Resume(ctx context.Context, r *taskAPI.ResumeRequest) (*emptypb.Empty, error) {
	c, err := s.appContainer(r.ID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if err := c.pod.resume(ctx); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	s.send(&eventstypes.TaskResumed{ContainerID: r.ID})
	return empty, nil
}

func (s *service) appContainer(id string) (*container, error) {
	c, err := s.get(id)
	if err != nil {
		return nil, err
	}
	if c.sandbox {
		return nil, fmt.Errorf("%w: the pause container of a sandlot pod runs nothing", errdefs.ErrNotImplemented)
	}
	return c, nil
}

func (s *service) Checkpoint(ctx context.Context, r *taskAPI.CheckpointTaskRequest) (*emptypb.Empty, error) {
	return nil, errgrpc.ToGRPC(fmt.Errorf("%w: checkpoint a sandlot pod with a Snapshot (the control API), not CRIU", errdefs.ErrNotImplemented))
}

// Update accepts resource updates and ignores them: a VM's vCPUs and
// memory are fixed when it starts.
func (s *service) Update(ctx context.Context, r *taskAPI.UpdateTaskRequest) (*emptypb.Empty, error) {
	if _, err := s.get(r.ID); err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	return empty, nil
}

func (s *service) ResizePty(ctx context.Context, r *taskAPI.ResizePtyRequest) (*emptypb.Empty, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	return empty, errgrpc.ToGRPC(s.guestCall(c, p, func(pid int, g guest) error {
		return g.Resize(ctx, pid, uint16(r.Width), uint16(r.Height))
	}))
}

func (s *service) CloseIO(ctx context.Context, r *taskAPI.CloseIORequest) (*emptypb.Empty, error) {
	c, p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	if !r.Stdin || p.drainStdin(ctx) {
		return empty, nil
	}
	return empty, errgrpc.ToGRPC(s.guestCall(c, p, func(pid int, g guest) error {
		return g.CloseStdin(ctx, pid)
	}))
}

func (s *service) Stats(ctx context.Context, r *taskAPI.StatsRequest) (*taskAPI.StatsResponse, error) {
	c, err := s.appContainer(r.ID)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	stats, err := c.pod.metrics()
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	return &taskAPI.StatsResponse{Stats: stats}, nil
}

func (s *service) Connect(ctx context.Context, r *taskAPI.ConnectRequest) (*taskAPI.ConnectResponse, error) {
	resp := &taskAPI.ConnectResponse{ShimPid: uint32(os.Getpid())}
	if c, err := s.get(r.ID); err == nil {
		resp.TaskPid = s.taskPID(c)
	}
	return resp, nil
}

func (s *service) Shutdown(ctx context.Context, r *taskAPI.ShutdownRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.containers) > 0 {
		return empty, nil
	}
	s.shutdown.Shutdown()
	return empty, nil
}

// namespace of a request (containerd sets it on every call).
func namespace(ctx context.Context) string {
	ns, _ := namespaces.Namespace(ctx)
	return ns
}

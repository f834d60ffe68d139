package crienv

// CRI pod and container helpers: configs as kubelet makes them, running
// and removing pods, starting containers, ExecSync, and reaching a pod over
// HTTP (WaitHTTP).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// PodConfig is the config RunPod uses: a fresh UID, namespace "default",
// hostname name, logs under Dir/pods, the Env's cgroup parent, and the
// namespaces kubelet asks for (network and IPC per pod, PID per container).
func (e *Env) PodConfig(name string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	uid := newUID()
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "default"},
		Hostname:     name,
		LogDirectory: filepath.Join(e.Dir, "pods", "default_"+name+"_"+uid),
		Labels: map[string]string{
			"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": uid,
		},
		Annotations: annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: e.CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

// newUID is a random RFC 4122 version 4 UUID, like a pod's UID.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// RunPod runs a pod sandbox with PodConfig(name, annotations) and the
// runtime handler ("runc", "sandlot", or "" for the default).
func (e *Env) RunPod(t T, name, handler string, annotations map[string]string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	cfg := e.PodConfig(name, annotations)
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := e.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("crienv: RunPodSandbox %s (handler %q): %v", name, handler, err)
	}
	return resp.PodSandboxId, cfg
}

// PodIP is the pod's IP from PodSandboxStatus.
func (e *Env) PodIP(t T, podID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	st, err := e.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatalf("crienv: PodSandboxStatus %s: %v", podID, err)
	}
	ip := st.GetStatus().GetNetwork().GetIp()
	if ip == "" {
		t.Fatalf("crienv: pod %s has no IP", podID)
	}
	return ip
}

// ContainerConfig is the config CreateStart uses: the pod's namespaces,
// the log at <pod log dir>/<name>/0.log as kubelet names it.
func ContainerConfig(cfg *runtimeapi.PodSandboxConfig, name, image string, envs map[string]string) *runtimeapi.ContainerConfig {
	keys := make([]string, 0, len(envs))
	for k := range envs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	kvs := make([]*runtimeapi.KeyValue, 0, len(keys))
	for _, k := range keys {
		kvs = append(kvs, &runtimeapi.KeyValue{Key: k, Value: []byte(envs[k])})
	}
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Envs:     kvs,
		LogPath:  filepath.Join(name, "0.log"),
		Labels:   map[string]string{"io.kubernetes.container.name": name},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
	}
}

// ContainerLogPath is where CRI writes the log of the container name that
// CreateStart made in the pod with cfg.
func ContainerLogPath(cfg *runtimeapi.PodSandboxConfig, name string) string {
	return filepath.Join(cfg.LogDirectory, name, "0.log")
}

// CreateStart creates and starts a container running image's own command
// and returns its ID.
func (e *Env) CreateStart(t T, podID string, cfg *runtimeapi.PodSandboxConfig, name, image string, envs map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	c, err := e.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID, Config: ContainerConfig(cfg, name, image, envs), SandboxConfig: cfg,
	})
	if err != nil {
		t.Fatalf("crienv: CreateContainer %s in pod %s: %v", name, podID, err)
	}
	if _, err := e.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatalf("crienv: StartContainer %s (%s): %v", name, c.ContainerId, err)
	}
	return c.ContainerId
}

// ContainerState is the container's CRI state.
func (e *Env) ContainerState(t T, containerID string) runtimeapi.ContainerState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	st, err := e.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID})
	if err != nil {
		t.Fatalf("crienv: ContainerStatus %s: %v", containerID, err)
	}
	return st.GetStatus().GetState()
}

// ExecSync runs cmd in the container (10 s timeout) and returns its output
// and exit code; a failing RPC fails the test.
func (e *Env) ExecSync(t T, containerID string, cmd ...string) (stdout, stderr string, exitCode int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout+5*time.Second)
	defer cancel()
	resp, err := e.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: containerID, Cmd: cmd, Timeout: int64(execTimeout / time.Second),
	})
	if err != nil {
		t.Fatalf("crienv: ExecSync %v in %s: %v", cmd, containerID, err)
	}
	return string(resp.Stdout), string(resp.Stderr), resp.ExitCode
}

// RemovePod stops and removes the pod sandbox and its containers.
func (e *Env) RemovePod(t T, podID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if err := e.removePod(ctx, podID); err != nil {
		t.Fatalf("crienv: %v", err)
	}
}

func (e *Env) removePod(ctx context.Context, id string) error {
	if _, err := e.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("stop pod %s: %w", id, err)
	}
	if _, err := e.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("remove pod %s: %w", id, err)
	}
	return nil
}

// directHTTP never uses a proxy from the environment: pod IPs are only
// reachable from this host.
var directHTTP = &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}

// WaitHTTP polls GET url every 20 ms until any HTTP answer arrives. It
// ignores HTTP(S)_PROXY.
func WaitHTTP(ctx context.Context, url string) error {
	return poll.Every(ctx, pollInterval, "GET "+url+": an answer", func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return poll.Stop(err)
		}
		resp, err := directHTTP.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

package cluster

// The node agent's faults, injected the way they reach a user: its pod's
// processes frozen and killed (a crash), its pod kept off the node (the
// DaemonSet no longer runs there) or replaced (an upgrade, an eviction).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandlot-dev/sandlot/internal/poll"
)

// AgentLabel is the node label the chart's agent DaemonSet selects in a
// test cluster (its agent.nodeSelector value, besides the runtime label):
// StopAgent takes it off a node, StartAgent puts it back.
const AgentLabel = "test.sandlot.dev/agent"

// agentSelector finds the agent pods (the chart's component label).
const agentSelector = "app.kubernetes.io/name=sandlot-agent"

// StopAgent crashes node's agent and keeps it off the node until
// StartAgent: its pod's processes are frozen at once (it does nothing
// more, as if it died now), the node loses AgentLabel so the DaemonSet
// deletes the pod instead of the kubelet restarting it, then the frozen
// processes are killed. It works with the node's kubelet down too.
func (c *Cluster) StopAgent(node string) error {
	pod, err := c.AgentPod(node)
	if err != nil {
		return err
	}
	cg, err := c.podFreezer(node, pod.UID)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("FROZEN"), 0o644); err != nil {
		return fmt.Errorf("freeze the agent on %s: %w", node, err)
	}
	if err := c.labelNode(node, nil); err != nil {
		return err
	}
	// Killed once the pod is going: a kubelet that saw it die before then
	// would restart it.
	if err := c.waitAgentPod(node, "the agent pod on "+node+" being deleted", func(p *corev1.Pod) bool {
		return p == nil || p.UID != pod.UID || p.DeletionTimestamp != nil
	}); err != nil {
		return err
	}
	return killCgroup(cg)
}

// StartAgent puts AgentLabel back on node and waits until a new agent pod
// there is Ready. It lives as long as the cluster.
func (c *Cluster) StartAgent(node string) error {
	v := "run"
	if err := c.labelNode(node, &v); err != nil {
		return err
	}
	return c.waitAgentPod(node, "an agent pod Ready on "+node, func(p *corev1.Pod) bool {
		return p != nil && p.DeletionTimestamp == nil && podReady(p)
	})
}

// KillAgent SIGKILLs the processes of node's agent container, as a crash
// would; the kubelet restarts the container. It returns once the agent
// runs again and is Ready.
func (c *Cluster) KillAgent(node string) error {
	pod, err := c.AgentPod(node)
	if err != nil {
		return err
	}
	restarts := agentRestarts(pod)
	cg, err := c.podFreezer(node, pod.UID)
	if err != nil {
		return err
	}
	// The agent container's cgroup only: the pod's sandbox (its pause
	// process, its network) stays, as when the agent crashes.
	id, err := agentContainerID(pod)
	if err != nil {
		return err
	}
	if err := killCgroup(filepath.Join(cg, id)); err != nil {
		return err
	}
	return c.waitAgentPod(node, "the agent on "+node+" restarted and Ready", func(p *corev1.Pod) bool {
		return p != nil && p.UID == pod.UID && agentRestarts(p) > restarts && podReady(p)
	})
}

// ReplaceAgentPod deletes node's agent pod and waits until the
// DaemonSet's replacement is Ready: an upgrade or an eviction.
func (c *Cluster) ReplaceAgentPod(node string) error {
	pod, err := c.AgentPod(node)
	if err != nil {
		return err
	}
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cs.CoreV1().Pods(ReleaseNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete the agent pod on %s: %w", node, err)
	}
	return c.waitAgentPod(node, "a new agent pod Ready on "+node, func(p *corev1.Pod) bool {
		return p != nil && p.UID != pod.UID && p.DeletionTimestamp == nil && podReady(p)
	})
}

// AgentPod is the agent pod the DaemonSet runs on node (not one being
// deleted).
func (c *Cluster) AgentPod(node string) (*corev1.Pod, error) {
	pods, err := c.agentPods(context.Background(), node)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			return &pods[i], nil
		}
	}
	return nil, fmt.Errorf("no agent pod runs on %s (%d going)", node, len(pods))
}

func (c *Cluster) agentPods(ctx context.Context, node string) ([]corev1.Pod, error) {
	cs, err := c.Clientset()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(ReleaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector,
		FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("the agent pods on %s: %w", node, err)
	}
	return pods.Items, nil
}

// waitAgentPod waits (3 minutes at most) until ok holds for one of the
// agent pods on node, or for nil when there is none.
func (c *Cluster) waitAgentPod(node, what string, ok func(*corev1.Pod) bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return poll.Every(ctx, 250*time.Millisecond, what, func() error {
		pods, err := c.agentPods(ctx, node)
		if err != nil {
			return err
		}
		if len(pods) == 0 && ok(nil) {
			return nil
		}
		for i := range pods {
			if ok(&pods[i]) {
				return nil
			}
		}
		return fmt.Errorf("%d agent pods, none as wanted", len(pods))
	})
}

// labelNode sets AgentLabel on node to *v, or removes it (v nil).
func (c *Cluster) labelNode(node string, v *string) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	value := "null"
	if v != nil {
		value = strconv.Quote(*v)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, AgentLabel, value)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label %s %s=%s: %w", node, AgentLabel, value, err)
	}
	return nil
}

// agentContainerID is the runtime's ID of pod's agent container.
func agentContainerID(p *corev1.Pod) (string, error) {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "agent" && s.ContainerID != "" {
			_, id, _ := strings.Cut(s.ContainerID, "://")
			return id, nil
		}
	}
	return "", fmt.Errorf("pod %s shows no agent container", p.Name)
}

func agentRestarts(p *corev1.Pod) int32 {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "agent" {
			return s.RestartCount
		}
	}
	return 0
}

// podFreezer is the freezer cgroup of pod uid on node (the kubelet's
// cgroupfs layout under the node's cgroup root).
func (c *Cluster) podFreezer(node string, uid types.UID) (string, error) {
	n, err := c.node(node)
	if err != nil {
		return "", err
	}
	root := filepath.Join("/sys/fs/cgroup/freezer", n.cgroupRoot(c))
	want := "pod" + string(uid)
	var found string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != "" {
			return err
		}
		if d.IsDir() && (d.Name() == want || d.Name() == strings.ReplaceAll(want, "-", "_")) {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("the freezer cgroup of pod %s on %s: %w", uid, node, err)
	}
	if found == "" {
		return "", fmt.Errorf("no freezer cgroup of pod %s under %s", uid, root)
	}
	return found, nil
}

// killCgroup SIGKILLs every process in cgroup dir and its children (a
// frozen process dies of SIGKILL too) and thaws it.
func killCgroup(dir string) error {
	var errs []error
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("kill the processes of %s: %w", dir, err))
	}
	if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

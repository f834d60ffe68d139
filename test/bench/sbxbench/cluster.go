package sbxbench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/internal/poll"
)

// pollPeriod is the period of the few waits that poll (objects and pods
// gone): fixed, as a pause's row times its pod gone.
const pollPeriod = 50 * time.Millisecond

// ZeroOverhead drops the CPU of the RuntimeClass's per-pod overhead
// (100m) in a benchmark's cluster: with it a 2-core node admits 18 pods,
// too few for the levels asked. Its memory (96 MiB) stays: QEMU runs in
// the pod's cgroup (the jail), and a VM whose pod limit is its guest
// memory alone is OOM-killed while it boots.
func ZeroOverhead(ctx context.Context, k client.Client) error {
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: sandlotv1.RuntimeClassName}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"overhead":{"podFixed":{"cpu":null}}}`))
	if err := k.Patch(ctx, rc, patch); err != nil {
		return fmt.Errorf("RuntimeClass %s: drop the overhead's CPU: %w", rc.Name, err)
	}
	return nil
}

// OverheadMiB is the memory of the RuntimeClass's per-pod overhead.
func OverheadMiB(ctx context.Context, k client.Client) (int64, error) {
	rc := &nodev1.RuntimeClass{}
	if err := k.Get(ctx, client.ObjectKey{Name: sandlotv1.RuntimeClassName}, rc); err != nil {
		return 0, fmt.Errorf("RuntimeClass %s: %w", sandlotv1.RuntimeClassName, err)
	}
	if rc.Overhead == nil {
		return 0, nil
	}
	return rc.Overhead.PodFixed.Memory().Value() >> 20, nil
}

// InPoolPod: the sandbox runs in a warm pool pod or a start slot (named
// by the pool, not after the sandbox).
func InPoolPod(s *sandlotv1.Sandbox) bool { return s.Status.PodName != s.Name }

// SetPool sets a template's warm pool size and waits until each of nodes' pools,
// as the controller reports it for this spec, has that many Ready and
// none Starting.
func SetPool(ctx context.Context, k client.WithWatch, template string, n int, nodes ...string) error {
	return setPoolSize(ctx, k, template, "warmPool", n, func(p sandlotv1.NodePool) bool {
		return p.Ready == int32(n) && p.Starting == 0
	}, nodes)
}

// SetSlots sets a template's start slots per node and waits until each
// of nodes has that many running.
func SetSlots(ctx context.Context, k client.WithWatch, template string, n int, nodes ...string) error {
	return setPoolSize(ctx, k, template, "slots", n, func(p sandlotv1.NodePool) bool { return p.Slots == int32(n) }, nodes)
}

// setPoolSize patches spec.<field> to n and waits until full holds for
// each of nodes' pools as the controller reports them for this spec.
func setPoolSize(ctx context.Context, k client.WithWatch, template, field string, n int, full func(sandlotv1.NodePool) bool, nodes []string) error {
	tpl := &sandlotv1.Template{ObjectMeta: Meta(template)}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{%q:%d}}`, field, n))
	if err := k.Patch(ctx, tpl, patch); err != nil {
		return fmt.Errorf("%s %d: %w", field, n, err)
	}
	gen, last := tpl.Generation, sandlotv1.NodePool{}
	err := Until(ctx, k, &sandlotv1.TemplateList{}, template, func(t *sandlotv1.Template) (bool, error) {
		if t.Status.ObservedGeneration < gen {
			return false, nil
		}
		for _, node := range nodes {
			last = sandlotv1.NodePool{Node: node}
			for _, p := range t.Status.Pool {
				if p.Node == node {
					last = p
				}
			}
			if !full(last) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s %d: %w (last: %+v)", field, n, err, last)
	}
	return nil
}

// Remove deletes objects (a Snapshot's deletion waits for the sandboxes
// restored from it) and waits until they and every sandlot pod are gone,
// claimed pool pods included, so VMs do not pile up between rows.
func Remove(ctx context.Context, k client.Client, objs ...client.Object) error {
	for _, o := range objs {
		if err := k.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %s: %w", o.GetName(), err)
		}
	}
	for _, o := range objs {
		if err := Gone(ctx, k, o); err != nil {
			return err
		}
	}
	return NoPods(ctx, k)
}

// Gone polls until the object is not found.
func Gone(ctx context.Context, k client.Client, o client.Object) error {
	return poll.Every(ctx, pollPeriod, fmt.Sprintf("%T %s gone", o, o.GetName()), func() error {
		if err := k.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// NoPods polls until no sandlot pod is left but unclaimed start slots
// (which hold no VM): every sandbox's and pool pod carries the sandbox
// label (a pool pod's empty until claimed).
func NoPods(ctx context.Context, k client.Client) error {
	return poll.Every(ctx, pollPeriod, "no sandlot pod left", func() error {
		pods := &corev1.PodList{}
		err := k.List(ctx, pods, client.InNamespace("default"), client.HasLabels{sandlotv1.LabelSandbox})
		pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
			return p.Labels[sandlotv1.LabelSandbox] == "" && sandlotv1.IsStartSlot(p.Annotations)
		})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		var left []string
		for _, p := range pods.Items {
			left = append(left, p.Name)
		}
		return fmt.Errorf("pods %v still there (%v)", left, err)
	})
}

// FloorRow is the bare QEMU restore's row in bench-vm's table, and
// FloorDensityRow its bare clones' free-memory drop (with -floor-clones).
const (
	FloorRow        = "restore to first answer (floor: bare QEMU)"
	FloorDensityRow = "host free-memory drop per idle clone (floor)"
)

// Floor runs bench-vm -floor (n restores) and returns the bare restores.
func Floor(n int) ([]float64, error) {
	rows, err := FloorRows(n, 0)
	return rows[FloorRow], err
}

// FloorConcurrentRow is the row of n bare restores at once (bench-vm
// -floor-concurrent): the wall time until every guest answered.
func FloorConcurrentRow(n int) string {
	return fmt.Sprintf("%d bare QEMU restores at once: all answered (floor)", n)
}

// FloorRows runs bench-vm -floor with n restores and, when clones > 0, that
// many idle bare clones, and for each of concurrent that many bare restores
// at once; it returns its rows' samples by name.
func FloorRows(n, clones int, concurrent ...int) (map[string][]float64, error) {
	args := []string{"run", "./test/bench/vm", "-floor", "-json", "-n", strconv.Itoa(n), "-floor-clones", strconv.Itoa(clones)}
	if len(concurrent) > 0 {
		var levels []string
		for _, c := range concurrent {
			levels = append(levels, strconv.Itoa(c))
		}
		args = append(args, "-floor-concurrent", strings.Join(levels, ","))
	}
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Stderr = cluster.RepoRoot(), os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("bench-vm -floor: %w", err)
	}
	var res struct {
		Results []struct {
			Name    string    `json:"name"`
			Samples []float64 `json:"samples"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("bench-vm -floor output: %w", err)
	}
	rows := map[string][]float64{}
	for _, r := range res.Results {
		rows[r.Name] = r.Samples
	}
	want := []string{FloorRow}
	if clones > 0 {
		want = append(want, FloorDensityRow)
	}
	for _, c := range concurrent {
		want = append(want, FloorConcurrentRow(c))
	}
	for _, w := range want {
		if _, ok := rows[w]; !ok {
			return nil, fmt.Errorf("bench-vm -floor printed no %q row", w)
		}
	}
	return rows, nil
}

package shim

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// fakeSelf records what the service does to its own process.
type fakeSelf struct {
	mu       sync.Mutex
	confined []string // "<id> <MiB>"
	oom      []int
	released int
}

func (f *fakeSelf) Confine(_ context.Context, id string, maxMiB int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confined = append(f.confined, id+" "+strconv.Itoa(maxMiB))
}

func (f *fakeSelf) Release(context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
}

func (f *fakeSelf) SetOOMScoreAdj(v int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.oom = append(f.oom, v)
	return nil
}

// withShimMemory rewrites the harness's node config with the key (nil:
// left out).
func (h *harness) withShimMemory(miB *int) {
	h.t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(mustJSON(h.t, h.cfg)), &m); err != nil {
		h.t.Fatal(err)
	}
	if miB != nil {
		m["shimMemoryMaxMiB"] = *miB
	}
	h.writeFile(filepath.Join(filepath.Dir(h.cfg.Root), "config.json"), mustJSON(h.t, m))
}

// TestCreatePauseConfinesTheShim: the pause container's Create, before
// any VM, moves the shim into its capped cgroup, with the config's cap.
func TestCreatePauseConfinesTheShim(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		name       string
		miB        *int
		cgroupPath string
		want       []string
	}{
		{"default", nil, "/kubepods/burstable/pod1/abc", []string{testPod + " 128"}},
		{"configured", n(256), "kubepods-pod1.slice:cri-containerd:abc", []string{testPod + " 256"}},
		{"off", n(0), "/kubepods/burstable/pod1/abc", []string{testPod + " 0"}},
		{"no pod cgroup: QEMU would inherit the cap", nil, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			self := &fakeSelf{}
			h.s.host.self = self
			h.withShimMemory(tc.miB)
			spec := pauseSpec()
			spec.Linux.CgroupsPath = tc.cgroupPath
			h.mustCreate(testPod, spec)
			if !slices.Equal(self.confined, tc.want) {
				t.Errorf("confined %q, want %q", self.confined, tc.want)
			}
			h.s.shutdown.Shutdown()
			<-h.s.shutdown.Done()
			if self.released != 1 {
				t.Errorf("released %d times at shutdown, want once", self.released)
			}
		})
	}
}

// TestCreateAppAdoptsThePodsOOMScore: the shim takes the app container's
// OOM score (the kubelet's, by QoS class), not the pause container's.
func TestCreateAppAdoptsThePodsOOMScore(t *testing.T) {
	h := newHarness(t)
	self := &fakeSelf{}
	h.s.host.self = self
	pause, app := pauseSpec(), appSpec()
	pauseScore, appScore := -998, 937
	pause.Process = &specs.Process{OOMScoreAdj: &pauseScore}
	app.Process.OOMScoreAdj = &appScore
	h.mustCreate(testPod, pause)
	h.mustCreate(testApp, app)
	if !slices.Equal(self.oom, []int{937}) {
		t.Errorf("oom_score_adj set to %v, want [937]", self.oom)
	}
}

package shim

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/ttrpc"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	"github.com/sandlot-dev/sandlot/api/snapshot"
	"github.com/sandlot-dev/sandlot/vm"
)

// TestControlAPI: the node agent's calls on the pod's control socket act
// on the pod's VM.
func TestControlAPI(t *testing.T) {
	h := newHarness(t)
	m, _ := h.startedPod()
	conn, err := net.Dial("unix", h.cfg.Layout().ControlSocket(testUID))
	if err != nil {
		t.Fatal(err)
	}
	client := ttrpc.NewClient(conn)
	defer client.Close()
	api := controlapi.NewVMControlClient(client)

	if _, err := api.Pause(h.ctx, &controlapi.PauseRequest{}); err != nil || m.State() != vm.Paused {
		t.Fatalf("pause: %v, VM %s", err, m.State())
	}
	if st := h.state(testApp, ""); st.Status != task.Status_PAUSED {
		t.Fatalf("task %v while the agent paused the VM", st.Status)
	}
	if _, err := api.Resume(h.ctx, &controlapi.ResumeRequest{}); err != nil || m.State() != vm.Running {
		t.Fatalf("resume: %v, VM %s", err, m.State())
	}
	snap, err := api.Snapshot(h.ctx, &controlapi.SnapshotRequest{Dir: t.TempDir()})
	var man snapshot.Manifest
	if err != nil || json.Unmarshal(snap.ManifestJson, &man) != nil || man.Labels[labelInitPID] != "101" {
		t.Fatalf("snapshot = %+v, %v", snap, err)
	}
	if _, err := api.Snapshot(h.ctx, &controlapi.SnapshotRequest{Dir: "relative"}); err == nil {
		t.Fatal("a snapshot into a relative directory")
	}
	st, err := api.Stats(h.ctx, &controlapi.StatsRequest{})
	if err != nil || st.State != string(vm.Running) || st.QemuPid != int32(m.pid) || st.PssBytes != 64<<20 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
	_, err = api.SetIdentity(h.ctx, &controlapi.SetIdentityRequest{SandboxId: "claimed", Hostname: "claimed-host"})
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	id := m.identity
	m.mu.Unlock()
	if id.SandboxID != "claimed" || id.Hostname != "claimed-host" || id.Network != nil {
		t.Fatalf("identity pushed %+v (the network stays the pod's)", id)
	}
	if c, _ := h.s.get(testApp); c.pod.identity.Network == nil || c.pod.identity.SandboxID != "claimed" {
		t.Fatalf("pod identity %+v", c.pod.identity)
	}
}

// TestGuestTime: what a guest reports of its steps reaches the node's log
// as one bounded duration, whatever it sends.
func TestGuestTime(t *testing.T) {
	cases := []struct {
		steps map[string]int64
		want  time.Duration
	}{
		{nil, 0},
		{map[string]int64{"rng": 1_500_000, "clock": 500_000}, 2 * time.Millisecond},
		{map[string]int64{"a": -5_000_000, "b": 1_000_000}, time.Millisecond},
		{map[string]int64{"a\nfake log line": 1 << 62, "b": 1 << 62}, 2 * time.Minute},
	}
	for _, c := range cases {
		if got := guestTime(c.steps); got != c.want {
			t.Errorf("guestTime(%v) = %v, want %v", c.steps, got, c.want)
		}
	}
}

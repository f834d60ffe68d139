package sandbox

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

func TestDescribeNode(t *testing.T) {
	ready := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s, Reason: "NodeStatusUnknown"}}}}
	}
	outOfService := ready(corev1.ConditionUnknown)
	outOfService.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	tests := []struct {
		name         string
		node         *corev1.Node
		down, fenced bool
		why          string
	}{
		{"ready", ready(corev1.ConditionTrue), false, false, ""},
		{"deleted", nil, true, true, "node n1 is deleted"},
		{"not answering: it may still run its VMs", ready(corev1.ConditionUnknown), true, false, "node n1 is not ready since"},
		{"out of service: an operator says it is off", outOfService, true, true, "node n1 is out of service"},
	}
	for _, tc := range tests {
		got := describeNode("n1", tc.node)
		if got.down != tc.down || got.fenced != tc.fenced || !strings.HasPrefix(got.why, tc.why) {
			t.Errorf("%s: %+v, want down %v fenced %v why %q…", tc.name, got, tc.down, tc.fenced, tc.why)
		}
	}
}

func TestDecideNodeLost(t *testing.T) {
	up := nodeState{}
	unreachable := nodeState{down: true, why: "node n1 is not ready"}
	fenced := nodeState{down: true, fenced: true, why: "node n1 is deleted"}
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "s1"}}
	tests := []struct {
		name   string
		policy sandlotv1.NodeLostAction
		node   nodeState
		snap   *sandlotv1.Snapshot
		want   nodeLostAction
		msg    string
	}{
		{"node up: the pod's own story", sandlotv1.NodeLostRestore, up, snap, nodeLostNone, ""},
		{"default: reported", "", fenced, snap, nodeLostFail, "its VM is lost"},
		{"Report: reported", sandlotv1.NodeLostReport, unreachable, snap, nodeLostFail, "its VM is lost"},
		{"Restore, node not fenced: waits", sandlotv1.NodeLostRestore, unreachable, snap, nodeLostWait, "once the node is deleted or tainted"},
		{"Restore, nothing to restore: fails, saying so", sandlotv1.NodeLostRestore, fenced, nil, nodeLostFail, "no Snapshot of the sandbox"},
		{"Restore", sandlotv1.NodeLostRestore, fenced, snap, nodeLostRestore, "restoring snapshot s1 on another node"},
	}
	for _, tc := range tests {
		got, msg := decideNodeLost(tc.policy, tc.node, tc.snap)
		if got != tc.want || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %v %q, want %v %q", tc.name, got, msg, tc.want, tc.msg)
		}
	}
}

func TestNewestRestorable(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	snap := func(name, id string, age time.Duration, phase sandlotv1.DataPhase, remote sandlotv1.RemoteStatus, deleting bool) sandlotv1.Snapshot {
		s := sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-age))}}
		s.Status.SandboxID, s.Status.Phase, s.Status.RemoteStatus = id, phase, remote
		if deleting {
			now := metav1.NewTime(t0)
			s.DeletionTimestamp = &now
		}
		return s
	}
	ready, remote := sandlotv1.DataReady, sandlotv1.RemoteReady
	snaps := []sandlotv1.Snapshot{
		snap("old", "a", time.Hour, ready, remote, false),
		snap("newer", "a", time.Minute, ready, remote, false),
		snap("local-only", "a", time.Second, ready, "", false),
		snap("going", "a", time.Second, ready, remote, true),
		snap("not-ready", "a", time.Second, sandlotv1.DataPending, remote, false),
		snap("another-sandbox-of-the-name", "b", time.Second, ready, remote, false),
	}
	if got := newestRestorable(snaps, "a"); got == nil || got.Name != "newer" {
		t.Errorf("newest restorable: %v, want newer", got)
	}
	if got := newestRestorable(snaps[2:5], "a"); got != nil {
		t.Errorf("none restorable: got %s", got.Name)
	}
}

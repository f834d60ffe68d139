package template

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
)

func TestDecideBuild(t *testing.T) {
	now := time.Now()
	started := metav1.NewTime(now.Add(-time.Minute))
	running := &sandlotv1.Sandbox{Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxRunning, StartedAt: &started}}
	pod := func(ready bool, waiting string) *corev1.Pod {
		p := &corev1.Pod{}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		if waiting != "" {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Image: "img", State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}}
		}
		return p
	}
	snap := func(phase sandlotv1.DataPhase) *sandlotv1.Snapshot {
		s := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "b"}}
		s.Status.Phase = phase
		return s
	}
	ready := &sandlotv1.BaseSnapshot{Node: "n", Phase: sandlotv1.BaseReady}
	sourceFailed := func(s *sandlotv1.Snapshot) *sandlotv1.Snapshot {
		s.Status.Conditions = []metav1.Condition{{Type: sandlotv1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: sandlotv1.ReasonSourceFailed}}
		return s
	}
	rebuilding := &sandlotv1.BaseSnapshot{Node: "n", Phase: sandlotv1.BaseBuilding, Reason: sandlotv1.ReasonBaseSnapshotDeleted}
	deleting := func(s *sandlotv1.Snapshot) *sandlotv1.Snapshot {
		s.DeletionTimestamp = &started
		return s
	}
	built := func(s metav1.ConditionStatus, reason string) *metav1.Condition {
		return &metav1.Condition{Type: sandlotv1.ConditionBuilt, Status: s, Reason: reason, Message: "m"}
	}
	twoRuns := []sandlotv1.BuildStep{{Type: sandlotv1.StepRun}, {Type: sandlotv1.StepRun}}
	checkpointing := func(n int32) *sandlotv1.Sandbox {
		b := running.DeepCopy()
		b.Status.BuildCheckpoint = n
		return b
	}
	cases := map[string]struct {
		w         builderWorld
		wantPhase sandlotv1.BasePhase
		reason    string
		want      buildStep // only the action flags are compared
	}{
		"nothing yet: create the builder":  {w: builderWorld{}, wantPhase: sandlotv1.BaseBuilding, want: buildStep{CreateBuilder: true}},
		"builder without pod: wait":        {w: builderWorld{Builder: running}, wantPhase: sandlotv1.BaseBuilding},
		"probe not passed yet: wait":       {w: builderWorld{Builder: running, Pod: pod(false, ""), Probe: 2 * time.Minute}, wantPhase: sandlotv1.BaseBuilding},
		"probe passed: snapshot":           {w: builderWorld{Builder: running, Pod: pod(true, "")}, wantPhase: sandlotv1.BaseBuilding, want: buildStep{CreateSnapshot: true}},
		"snapshot under way: wait":         {w: builderWorld{Builder: running, Snap: snap(sandlotv1.DataCreating)}, wantPhase: sandlotv1.BaseBuilding},
		"snapshot Ready: drop the builder": {w: builderWorld{Builder: running, Snap: snap(sandlotv1.DataReady)}, wantPhase: sandlotv1.BaseReady, reason: sandlotv1.ReasonBaseReady, want: buildStep{DeleteBuilder: true}},
		"snapshot Failed":                  {w: builderWorld{Builder: running, Snap: snap(sandlotv1.DataFailed)}, wantPhase: sandlotv1.BaseFailed, reason: sandlotv1.ReasonBuildFailed, want: buildStep{DeleteBuilder: true}},
		"image missing":                    {w: builderWorld{Builder: running, Pod: pod(false, "ErrImageNeverPull")}, wantPhase: sandlotv1.BaseFailed, reason: sandlotv1.ReasonImageMissing, want: buildStep{DeleteBuilder: true}},
		"probe timed out":                  {w: builderWorld{Builder: running, Pod: pod(false, ""), Probe: 30 * time.Second}, wantPhase: sandlotv1.BaseFailed, reason: sandlotv1.ReasonProbeTimeout, want: buildStep{DeleteBuilder: true}},
		"builder failed":                   {w: builderWorld{Builder: &sandlotv1.Sandbox{Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxFailed, Reason: "PodFailed"}}}, wantPhase: sandlotv1.BaseFailed, reason: sandlotv1.ReasonBuildFailed, want: buildStep{DeleteBuilder: true}},
		"build: probe passed, steps not started": {w: builderWorld{Builder: running, Pod: pod(true, ""), Build: true, Probe: time.Minute},
			wantPhase: sandlotv1.BaseBuilding},
		"build: steps running": {w: builderWorld{Builder: running, Pod: pod(true, ""), Build: true, Probe: time.Minute, Built: built(metav1.ConditionFalse, sandlotv1.ReasonBuildRunning)},
			wantPhase: sandlotv1.BaseBuilding, reason: sandlotv1.ReasonBuilding},
		"build: done, snapshot": {w: builderWorld{Builder: running, Pod: pod(true, ""), Build: true, Built: built(metav1.ConditionTrue, sandlotv1.ReasonBuildSucceeded)},
			wantPhase: sandlotv1.BaseBuilding, want: buildStep{CreateSnapshot: true}},
		"build: steps running, the probe failing": {w: builderWorld{Builder: running, Pod: pod(false, ""), Build: true, Probe: time.Second, Built: built(metav1.ConditionFalse, sandlotv1.ReasonBuildRunning)},
			wantPhase: sandlotv1.BaseBuilding, reason: sandlotv1.ReasonBuilding},
		"build: a step failed": {w: builderWorld{Builder: running, Pod: pod(true, ""), Build: true, Built: built(metav1.ConditionFalse, sandlotv1.ReasonBuildStepFailed)},
			wantPhase: sandlotv1.BaseFailed, reason: sandlotv1.ReasonBuildFailed, want: buildStep{DeleteBuilder: true}},
		"build: took too long": {w: builderWorld{Builder: &sandlotv1.Sandbox{Status: sandlotv1.SandboxStatus{Phase: sandlotv1.SandboxRunning,
			StartedAt: &metav1.Time{Time: now.Add(-2 * buildTimeout)}}}, Pod: pod(true, ""), Build: true, Built: built(metav1.ConditionFalse, sandlotv1.ReasonBuildRunning)},
			wantPhase: sandlotv1.BaseFailed, reason: sandlotv1.ReasonBuildFailed, want: buildStep{DeleteBuilder: true}},
		"build: a step asks for its checkpoint": {w: builderWorld{Builder: checkpointing(2), Pod: pod(true, ""), Build: true, Steps: twoRuns,
			Built: built(metav1.ConditionFalse, sandlotv1.ReasonBuildCheckpoint)}, wantPhase: sandlotv1.BaseBuilding, want: buildStep{Checkpoint: 2}},
		"build: a checkpoint asked after no such step": {w: builderWorld{Builder: checkpointing(3), Pod: pod(true, ""), Build: true, Steps: twoRuns,
			Built: built(metav1.ConditionFalse, sandlotv1.ReasonBuildCheckpoint)}, wantPhase: sandlotv1.BaseBuilding},
		"already Ready: keep, no builder":   {w: builderWorld{Entry: ready, Snap: snap(sandlotv1.DataReady)}, wantPhase: sandlotv1.BaseReady},
		"already Ready, builder left: drop": {w: builderWorld{Entry: ready, Snap: snap(sandlotv1.DataReady), Builder: running}, wantPhase: sandlotv1.BaseReady, want: buildStep{DeleteBuilder: true}},
		"Ready, its snapshot deleted: build again": {w: builderWorld{Entry: ready}, wantPhase: sandlotv1.BaseBuilding,
			reason: sandlotv1.ReasonBaseSnapshotDeleted, want: buildStep{CreateBuilder: true}},
		"Ready, its snapshot going: wait for it": {w: builderWorld{Entry: ready, Snap: deleting(snap(sandlotv1.DataReady))},
			wantPhase: sandlotv1.BaseBuilding, reason: sandlotv1.ReasonBaseSnapshotDeleted},
		// Found by the cluster's TestHeal: the next reconcile took the
		// going snapshot for a fresh one and said Ready again.
		"rebuilding, its old snapshot still going: not Ready": {w: builderWorld{Entry: rebuilding, Snap: deleting(snap(sandlotv1.DataReady))},
			wantPhase: sandlotv1.BaseBuilding, reason: sandlotv1.ReasonBaseSnapshotDeleted},
		"the builder went under its snapshot: retried": {w: builderWorld{Snap: sourceFailed(snap(sandlotv1.DataFailed))},
			wantPhase: sandlotv1.BaseFailed, reason: sandlotv1.ReasonBuilderLost},
		"the node's guest changed: build, saying so": {w: builderWorld{Replaces: "0ldguest"}, wantPhase: sandlotv1.BaseBuilding,
			reason: sandlotv1.ReasonGuestChanged, want: buildStep{CreateBuilder: true}},
		"the node's guest changed, built: Ready": {w: builderWorld{Replaces: "0ldguest", Builder: running, Snap: snap(sandlotv1.DataReady)},
			wantPhase: sandlotv1.BaseReady, reason: sandlotv1.ReasonBaseReady, want: buildStep{DeleteBuilder: true}},
		"the node's guest changed, build failed": {w: builderWorld{Replaces: "0ldguest", Builder: running, Snap: snap(sandlotv1.DataFailed)},
			wantPhase: sandlotv1.BaseFailed, reason: sandlotv1.ReasonBuildFailed, want: buildStep{DeleteBuilder: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.w.Now = now
			got := decideBuild(tc.w, sandlotv1.BaseSnapshot{Node: "n", Revision: "r2", Snapshot: "b"})
			if got.Entry.Phase != tc.wantPhase || (tc.reason != "" && got.Entry.Reason != tc.reason) {
				t.Fatalf("entry %+v, want phase %s reason %q", got.Entry, tc.wantPhase, tc.reason)
			}
			if got.CreateBuilder != tc.want.CreateBuilder || got.CreateSnapshot != tc.want.CreateSnapshot || got.DeleteBuilder != tc.want.DeleteBuilder ||
				got.Checkpoint != tc.want.Checkpoint {
				t.Fatalf("step %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestBaseCondition(t *testing.T) {
	e := func(node string, gen int, phase sandlotv1.BasePhase, reason string) sandlotv1.BaseSnapshot {
		return sandlotv1.BaseSnapshot{Node: node, Revision: fmt.Sprintf("r%d", gen), Phase: phase, Reason: reason, Message: "m"}
	}
	cases := map[string]struct {
		entries  []sandlotv1.BaseSnapshot
		eligible int
		status   metav1.ConditionStatus
		reason   string
	}{
		"one node Ready":         {[]sandlotv1.BaseSnapshot{e("a", 2, sandlotv1.BaseReady, ""), e("b", 2, sandlotv1.BaseBuilding, "")}, 2, metav1.ConditionTrue, sandlotv1.ReasonBaseReady},
		"old generation only":    {[]sandlotv1.BaseSnapshot{e("a", 1, sandlotv1.BaseReady, "")}, 1, metav1.ConditionFalse, sandlotv1.ReasonBuilding},
		"failed, none building":  {[]sandlotv1.BaseSnapshot{e("a", 2, sandlotv1.BaseFailed, sandlotv1.ReasonImageMissing)}, 1, metav1.ConditionFalse, sandlotv1.ReasonImageMissing},
		"failed, another builds": {[]sandlotv1.BaseSnapshot{e("a", 2, sandlotv1.BaseFailed, sandlotv1.ReasonProbeTimeout), e("b", 2, sandlotv1.BaseBuilding, "")}, 2, metav1.ConditionFalse, sandlotv1.ReasonBuilding},
		"no node to build on":    {nil, 0, metav1.ConditionFalse, sandlotv1.ReasonNoEligibleNode},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status, reason, msg := baseCondition(tc.entries, "r2", tc.eligible)
			if status != tc.status || reason != tc.reason || msg == "" {
				t.Fatalf("got %s %s %q, want %s %s", status, reason, msg, tc.status, tc.reason)
			}
		})
	}
}

func TestBaseName(t *testing.T) {
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "a-very-long-template-name-that-goes-on-and-on-for-ever-x", Generation: 12}}
	tpl.UID = "11111111-2222-3333-4444-555555555555"
	a, b := baseName(tpl, "node-1", ""), baseName(tpl, "node-2", "")
	if a == b || len(a) > 63 || a != baseName(tpl, "node-1", "") {
		t.Fatalf("names %q %q: want distinct, stable DNS labels", a, b)
	}
	if g := baseName(tpl, "node-1", "0123456789abcdef"); g == a || len(g) > 63 {
		t.Fatalf("a node's new guest names its base %q (before: %q): want another DNS label", g, a)
	}
	again := tpl.DeepCopy() // deleted and made again under the same name
	again.UID = "66666666-2222-3333-4444-555555555555"
	if baseName(again, "node-1", "") == a {
		t.Fatalf("a new template of the same name reuses %q: it would take the old one's snapshot", a)
	}
}

// TestBuildRevision: a build's ID alone does not change the base (a
// rebuild of the same steps is a cache hit); a step, a file or force does.
func TestBuildRevision(t *testing.T) {
	tpl := func(b *sandlotv1.TemplateBuild) *sandlotv1.Template {
		return &sandlotv1.Template{Spec: sandlotv1.TemplateSpec{Image: "img", Build: b}}
	}
	steps := func(cmd, hash string) []sandlotv1.BuildStep {
		return []sandlotv1.BuildStep{{Type: sandlotv1.StepRun, Args: []string{cmd}},
			{Type: sandlotv1.StepCopy, Args: []string{"a", "/a"}, FilesHash: hash}}
	}
	base := BaseRevision(tpl(&sandlotv1.TemplateBuild{ID: "b1", Steps: steps("make", "aa")}))
	same := map[string]*sandlotv1.TemplateBuild{
		"another build ID": {ID: "b2", Steps: steps("make", "aa")},
	}
	differ := map[string]*sandlotv1.TemplateBuild{
		"no build":        nil,
		"a changed RUN":   {ID: "b1", Steps: steps("make all", "aa")},
		"changed files":   {ID: "b1", Steps: steps("make", "bb")},
		"a start command": {ID: "b1", Steps: steps("make", "aa"), StartCmd: "serve"},
		"forced":          {ID: "b3", Steps: steps("make", "aa"), Force: true},
		"a step forced":   {ID: "b4", Steps: append(steps("make", "aa"), sandlotv1.BuildStep{Type: sandlotv1.StepRun, Args: []string{"x"}, Force: true})},
	}
	for name, b := range same {
		if got := BaseRevision(tpl(b)); got != base {
			t.Errorf("%s: revision %s, want %s", name, got, base)
		}
	}
	for name, b := range differ {
		if got := BaseRevision(tpl(b)); got == base {
			t.Errorf("%s: revision %s unchanged", name, got)
		}
	}
	if a, b := BaseRevision(tpl(&sandlotv1.TemplateBuild{ID: "x", Force: true})), BaseRevision(tpl(&sandlotv1.TemplateBuild{ID: "y", Force: true})); a == b {
		t.Errorf("two forced builds share revision %s", a)
	}
}

// TestBuildCheckpointName: a checkpoint after step n is named by steps
// 1..n and the VM, so a changed later step still finds it and a changed
// earlier one, another node or a forced build does not.
func TestBuildCheckpointName(t *testing.T) {
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: "t", UID: "u1"}, Spec: sandlotv1.TemplateSpec{Image: "img",
		Build: &sandlotv1.TemplateBuild{ID: "b1", Steps: []sandlotv1.BuildStep{
			{Type: sandlotv1.StepRun, Args: []string{"one"}}, {Type: sandlotv1.StepRun, Args: []string{"two"}}}}}}
	name := func(edit func(*sandlotv1.Template), node string, n int) string {
		c := tpl.DeepCopy()
		edit(c)
		return sandlotv1.BuildCheckpointName(c, node, n)
	}
	same := func(*sandlotv1.Template) {}
	base := name(same, "n1", 1)
	if len(base) > 63 || base != name(func(c *sandlotv1.Template) { c.Spec.Build.ID = "b2" }, "n1", 1) {
		t.Fatalf("%q: want a DNS label that a new build ID keeps", base)
	}
	if base != name(func(c *sandlotv1.Template) { c.Spec.Build.Steps[1].Args[0] = "changed" }, "n1", 1) {
		t.Error("a changed step 2 renames step 1's checkpoint")
	}
	differ := map[string]string{
		"step 2":             name(same, "n1", 2),
		"another node":       name(same, "n2", 1),
		"step 1 changed":     name(func(c *sandlotv1.Template) { c.Spec.Build.Steps[0].Args[0] = "uno" }, "n1", 1),
		"another image":      name(func(c *sandlotv1.Template) { c.Spec.Image = "img2" }, "n1", 1),
		"the template again": name(func(c *sandlotv1.Template) { c.UID = "u2" }, "n1", 1),
		"forced":             name(func(c *sandlotv1.Template) { c.Spec.Build.Force = true }, "n1", 1),
		"step 1 forced":      name(func(c *sandlotv1.Template) { c.Spec.Build.Steps[0].Force = true }, "n1", 1),
	}
	for what, got := range differ {
		if got == base {
			t.Errorf("%s: same checkpoint %q", what, got)
		}
	}
	if base != name(func(c *sandlotv1.Template) { c.Spec.Build.Steps[1].Force = true }, "n1", 1) {
		t.Error("step 2 forced renames step 1's checkpoint")
	}
}

// TestImageFailureHidesTheRegistrysAnswer: a template naming an image on
// a host the node reaches learns that the pull failed, not why (a port
// closed, a host unknown, a credential refused), from either status.
func TestImageFailureHidesTheRegistrysAnswer(t *testing.T) {
	answer := "failed to resolve reference \"10.0.0.7:6443/x:1\": dial tcp 10.0.0.7:6443: connect: connection refused"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	for _, reason := range []string{"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"} {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sandbox", Image: "10.0.0.7:6443/x:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: answer}}}}
		base := decideBuild(builderWorld{Builder: &sandlotv1.Sandbox{}, Pod: pod, Now: time.Now()}, sandlotv1.BaseSnapshot{Node: "n1"})
		for where, msg := range map[string]string{"template base": base.Entry.Message, "sandbox": podspec.PodWaiting(pod)} {
			if strings.Contains(msg, "connection refused") || strings.Contains(msg, "dial tcp") ||
				!strings.Contains(msg, reason) || !strings.Contains(msg, "10.0.0.7:6443/x:1") {
				t.Errorf("%s, %s: message %q: want the image and the reason, not the registry's answer", where, reason, msg)
			}
		}
	}
	pod.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: "the shim said no"}
	if msg := podspec.PodWaiting(pod); !strings.Contains(msg, "the shim said no") {
		t.Errorf("another waiting reason keeps its message: %q", msg)
	}
}

package kubectl

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// rows splits table output into lines of fields.
func rows(out string) [][]string {
	var rs [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rs = append(rs, strings.Fields(line))
	}
	return rs
}

// lsWorld is one running sandbox, one pending, a snapshot of the first
// and a paused sandbox with its PausedSandbox.
func lsWorld(t *testing.T, f *fixture, ns string) (running *sandlotv1.Sandbox) {
	t.Helper()
	running = f.sandbox(t, ns, "alpha", nil)
	f.running(t, running, "node-1", "10.0.0.7")
	setStatus(t, f, running, func(s *sandlotv1.Sandbox) {
		s.Status.Source = "template/python"
		s.Status.ExpiresAt = ptr.To(metav1.NewTime(time.Now().Add(10 * time.Minute)))
	})
	f.sandbox(t, ns, "beta", func(s *sandlotv1.Sandbox) { s.Spec.Source = sandlotv1.SandboxSource{Snapshot: "snap-1"} })
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "snap-1", Namespace: ns},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "alpha"}}}
	if err := f.c.Create(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	setStatus(t, f, snap, func(s *sandlotv1.Snapshot) {
		s.Status.Phase, s.Status.NodeName, s.Status.RemoteStatus = sandlotv1.DataReady, "node-1", sandlotv1.RemoteInProgress
		s.Status.TotalBytes, s.Status.DirtyBytes, s.Status.Location = 256<<20, 3<<20, "snapshots/"+ns+"/snap-1"
	})
	paused := f.sandbox(t, ns, "gamma", func(s *sandlotv1.Sandbox) { s.Spec.Paused = true })
	setStatus(t, f, paused, func(s *sandlotv1.Sandbox) { s.Status.Phase = sandlotv1.SandboxPaused })
	f.pausedSandbox(t, paused, "node-2", sandlotv1.RemoteReady, 1536<<20)
	return running
}

func TestLsSandboxes(t *testing.T) {
	f, ns := setup(t)
	alpha := lsWorld(t, f, ns)
	f.get(t, ns, "alpha", alpha)

	got := rows(f.ok(t, ns, "ls").out)
	want := [][]string{
		{"NAME", "PHASE", "ID", "NODE", "SOURCE", "AGE"},
		{"alpha", "Running", sandboxID(alpha), "node-1", "template/python"},
		{"beta", "<none>"},
		{"gamma", "Paused"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d: %q", len(got), len(want), got)
	}
	for i, w := range want {
		if len(got[i]) < len(w) || strings.Join(got[i][:len(w)], " ") != strings.Join(w, " ") {
			t.Errorf("row %d: got %q, want it to start with %q", i, got[i], w)
		}
	}
	if got[2][3] != "<none>" || got[2][4] != "snapshot/snap-1" {
		t.Errorf("beta: got node %q source %q, want <none> and snapshot/snap-1 (from the spec before the controller's status)", got[2][3], got[2][4])
	}

	wide := rows(f.ok(t, ns, "ls", "-o", "wide").out)
	if h := strings.Join(wide[0], " "); h != "NAME PHASE ID NODE SOURCE AGE IP EXPIRES VMREADY" {
		t.Errorf("wide header %q", h)
	}
	if a := strings.Join(wide[1][6:], " "); !strings.HasPrefix(a, "10.0.0.7 in 9m") && !strings.HasPrefix(a, "10.0.0.7 in 10m") {
		t.Errorf("alpha wide: got %q, want IP, EXPIRES in ~10m, VMREADY", a)
	}
	if wide[1][len(wide[1])-1] != "True" || wide[3][7] != "paused" {
		t.Errorf("wide: alpha VMREADY %q (want True), gamma EXPIRES %q (want paused)", wide[1][len(wide[1])-1], wide[3][7])
	}
}

func TestLsSnapshotsAndPausedShowRemoteStatus(t *testing.T) {
	f, ns := setup(t)
	lsWorld(t, f, ns)

	snaps := rows(f.ok(t, ns, "ls", "snapshots").out)
	if h := strings.Join(snaps[0], " "); h != "NAME PHASE NODE SOURCE REMOTESTATUS BYTES AGE" {
		t.Errorf("snapshot header %q", h)
	}
	if r := strings.Join(snaps[1][:6], " "); r != "snap-1 Ready node-1 sandbox/alpha InProgress 256.0MiB" {
		t.Errorf("snapshot row %q", r)
	}
	wide := f.ok(t, ns, "ls", "snap", "-o", "wide").out
	contains(t, "ls snap -o wide", wide, "DIRTY", "LOCATION", "3.0MiB", "snapshots/"+ns+"/snap-1")

	paused := rows(f.ok(t, ns, "ls", "paused").out)
	if r := strings.Join(paused[1][:6], " "); r != "gamma Ready node-2 sandbox/gamma Ready 1.5GiB" {
		t.Errorf("paused row %q", r)
	}
}

func TestLsJSONAndYAML(t *testing.T) {
	f, ns := setup(t)
	lsWorld(t, f, ns)

	var list sandlotv1.SandboxList
	out := f.ok(t, ns, "ls", "-o", "json").out
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("-o json is not a SandboxList: %v\n%s", err, out)
	}
	if list.Kind != "List" || list.APIVersion != "v1" || len(list.Items) != 3 || list.Items[0].Kind != "Sandbox" ||
		list.Items[0].APIVersion != "sandlot.dev/v1alpha1" || list.Items[0].Status.PodIP != "10.0.0.7" {
		t.Errorf("-o json: kind %q, %d items, first %s %s ip %q", list.Kind, len(list.Items),
			list.Items[0].APIVersion, list.Items[0].Kind, list.Items[0].Status.PodIP)
	}

	var snaps sandlotv1.SnapshotList
	out = f.ok(t, ns, "ls", "snapshots", "-o", "yaml").out
	if err := yaml.Unmarshal([]byte(out), &snaps); err != nil {
		t.Fatalf("-o yaml: %v\n%s", err, out)
	}
	if len(snaps.Items) != 1 || snaps.Items[0].Status.RemoteStatus != sandlotv1.RemoteInProgress {
		t.Errorf("-o yaml: %+v", snaps.Items)
	}
	contains(t, "ls paused -o yaml", f.ok(t, ns, "ls", "paused", "-o", "yaml").out, "kind: PausedSandbox", "remoteStatus: Ready")

	names := f.ok(t, ns, "ls", "-o", "name").out
	if names != "sandbox.sandlot.dev/alpha\nsandbox.sandlot.dev/beta\nsandbox.sandlot.dev/gamma\n" {
		t.Errorf("-o name:\n%s", names)
	}
}

func TestLsAllNamespacesAndEmpty(t *testing.T) {
	f, ns := setup(t)
	_, other := setup(t)
	f.sandbox(t, ns, "one", nil)
	f.sandbox(t, other, "two", nil)

	all := f.ok(t, ns, "ls", "-A").out
	contains(t, "ls -A", all, "NAMESPACE", ns, "one", other, "two")

	_, empty := setup(t)
	if out := f.ok(t, empty, "ls", "snapshots").out; out != "No snapshots found.\n" {
		t.Errorf("empty list: %q", out)
	}
	f.fails(t, ns, []string{"ls", "pods"}, `unknown kind "pods"`, "sandboxes, snapshots, paused or templates", "kubectl sandlot ls snapshots")
	f.fails(t, ns, []string{"ls", "-o", "xml"}, `unknown output format "xml": allowed: wide, json, yaml,`, "name", "jsonpath")
}

func TestLsTemplates(t *testing.T) {
	f, ns := setup(t)
	f.template(t, ns, "node")
	f.template(t, ns, "python")
	tpl := &sandlotv1.Template{}
	f.get(t, ns, "python", tpl)
	tpl.Spec.WarmPool, tpl.Spec.Resources = 2, sandlotv1.Resources{VCPU: 2, MemoryMiB: 1024}
	if err := f.c.Update(t.Context(), tpl); err != nil {
		t.Fatal(err)
	}
	setStatus(t, f, tpl, func(tpl *sandlotv1.Template) {
		tpl.Status.BaseRevision = "r2"
		tpl.Status.BaseSnapshots = []sandlotv1.BaseSnapshot{
			{Node: "node-1", Revision: "r1", Phase: sandlotv1.BaseReady, Snapshot: "old"}, // retired revision: not counted
			{Node: "node-1", Revision: "r2", Phase: sandlotv1.BaseReady, Snapshot: "b1"},
			{Node: "node-2", Revision: "r2", Phase: sandlotv1.BaseBuilding, Snapshot: "b2"},
		}
		tpl.Status.Pool = []sandlotv1.NodePool{{Node: "node-1", Ready: 2, Slots: 1}, {Node: "node-2", Ready: 1, Starting: 1, Slots: 1}}
		meta.SetStatusCondition(&tpl.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionBaseSnapshotReady,
			Status: metav1.ConditionFalse, Reason: "Building", Message: "node-2 builds"})
	})

	got := rows(f.ok(t, ns, "ls", "templates").out)
	want := [][]string{
		{"NAME", "IMAGE", "BASES", "POOL", "AGE"},
		{"node", "registry.example/python:3.12", "0/0", "0/0"},
		{"python", "registry.example/python:3.12", "1/2", "3/4"},
	}
	for i, w := range want {
		if len(got) <= i || len(got[i]) < len(w) || strings.Join(got[i][:len(w)], " ") != strings.Join(w, " ") {
			t.Errorf("row %d: got %q, want it to start with %q", i, got, w)
		}
	}
	wide := rows(f.ok(t, ns, "ls", "tpl", "-o", "wide").out)
	if h := strings.Join(wide[0], " "); h != "NAME IMAGE BASES POOL AGE SLOTS VCPU MEMORY BASE" {
		t.Errorf("wide header %q", h)
	}
	if r := strings.Join(wide[2][5:], " "); r != "2 2 1024MiB Building" {
		t.Errorf("python wide: %q, want SLOTS 2, VCPU 2, MEMORY 1024MiB, BASE Building", r)
	}
	if r := strings.Join(wide[1][5:], " "); r != "0 <none> <none> <none>" {
		t.Errorf("node wide: %q, want nothing set", r)
	}
	if out := f.ok(t, ns, "ls", "template", "-o", "name").out; out != "template.sandlot.dev/node\ntemplate.sandlot.dev/python\n" {
		t.Errorf("-o name:\n%s", out)
	}
	var list sandlotv1.TemplateList
	if err := json.Unmarshal([]byte(f.ok(t, ns, "ls", "templates", "-o", "json").out), &list); err != nil ||
		len(list.Items) != 2 || list.Items[1].Status.BaseRevision != "r2" || list.Items[1].Kind != "Template" {
		t.Errorf("-o json: %v %+v", err, list)
	}
}

package nodeagent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// stageAnswer is the agent's answer to a stage request.
type stageAnswer struct {
	Status  int
	Dir     string
	Token   string
	Message string
}

// stage asks the agent for ref's data as a shim does, naming pod; nil
// names none (a shim from before the pod was in stageapi.StageRequest).
func (a *agent) stage(ref sandlotv1.RestoreRef, pod *corev1.Pod) stageAnswer {
	a.t.Helper()
	req := map[string]string{"kind": ref.Kind, "uid": ref.UID}
	if pod != nil {
		req["podNamespace"], req["podName"], req["podUID"] = pod.Namespace, pod.Name, string(pod.UID)
	}
	body, err := json.Marshal(req)
	if err != nil {
		a.t.Fatal(err)
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.stageSocket)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: dial}}
	var ans stageAnswer
	// The server is a runnable of the agent's manager: it may not listen yet.
	a.eventually("the stage socket answers", func() error {
		resp, err := c.Post("http://agent"+stageapi.PathStage, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out struct {
			stageapi.StageResponse
			Message string `json:"message"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return fmt.Errorf("decode the answer (HTTP %d): %w", resp.StatusCode, err)
		}
		ans = stageAnswer{Status: resp.StatusCode, Dir: out.Dir, Token: out.Token, Message: out.Message}
		return nil
	})
	if ans.Token != "" {
		a.t.Cleanup(func() { _ = stageapi.NewClient(a.stageSocket).Release(context.Background(), ans.Token) })
	}
	return ans
}

// refused fails unless ans is a refusal saying want.
func (a *agent) refused(what string, ans stageAnswer, want string) {
	a.t.Helper()
	if ans.Status != http.StatusForbidden || !strings.Contains(ans.Message, "stage request refused: ") ||
		!strings.Contains(ans.Message, want) {
		a.t.Errorf("%s: HTTP %d %q, want 403 saying %q", what, ans.Status, ans.Message, want)
		return
	}
	a.t.Logf("%s: %s", what, ans.Message)
}

// restoringPod creates a pod on the agent's node in namespace ns, its
// annotations restoring ref as the controller writes them, controlled by
// owner (a Sandbox or Template) unless nil; mutate, unless nil, changes
// it before.
func (a *agent) restoringPod(ns, name string, owner client.Object, ref sandlotv1.RestoreRef, mutate ...func(*corev1.Pod)) *corev1.Pod {
	a.t.Helper()
	ann, err := sandlotv1.VMAnnotations{Restore: &ref}.Encode()
	if err != nil {
		a.t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: a.node, Containers: []corev1.Container{{Name: sandlotv1.ContainerName, Image: "sandbox"}}}}
	if owner != nil {
		kind := map[bool]string{true: "Template", false: "Sandbox"}[isTemplate(owner)]
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, sandlotv1.GroupVersion.WithKind(kind))}
	}
	for _, m := range mutate {
		m(pod)
	}
	if err := a.c.Create(context.Background(), pod); err != nil {
		a.t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	return pod
}

func isTemplate(o client.Object) bool {
	_, ok := o.(*sandlotv1.Template)
	return ok
}

// readySnapshot is a Snapshot of a running sandbox, Ready in the store,
// and the restore reference the controller writes for it.
func (a *agent) readySnapshot(name string) (*sandlotv1.Snapshot, sandlotv1.RestoreRef) {
	a.t.Helper()
	src, _, _ := a.runningSandbox(name+"-src", "stagesrc000000000001")
	snap := a.snapshot(name, src)
	st := a.waitSnapshot(snap, sandlotv1.DataReady)
	return snap, sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: snap.Name, UID: string(snap.UID), Location: st.Location}
}

// clone creates a Sandbox of namespace ns whose source is Snapshot snap.
func (a *agent) clone(ns, name, snap string) *sandlotv1.Sandbox {
	a.t.Helper()
	sbx := &sandlotv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: sandlotv1.SandboxSpec{Source: sandlotv1.SandboxSource{Snapshot: snap}}}
	if err := a.c.Create(context.Background(), sbx); err != nil {
		a.t.Fatalf("create sandbox %s/%s: %v", ns, name, err)
	}
	return sbx
}

// namespace creates a namespace of its own for the test.
func (a *agent) namespace(prefix string) string {
	a.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := a.c.Create(context.Background(), ns); err != nil {
		a.t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// TestStageRefusesAnotherNamespacesSnapshot: a pod of another namespace
// whose annotations name this namespace's Snapshot (UID, name and
// location) gets nothing, though owned by a Sandbox of its namespace
// whose source has that Snapshot's name, and with a Snapshot of its own
// of that name; the controller's pod of a clone of that Snapshot gets its
// directory. Without the pod in the request (today's shims), the data
// goes only while every pod of the node naming it may have it.
func TestStageRefusesAnotherNamespacesSnapshot(t *testing.T) {
	a := startAgent(t, nil)
	snap, ref := a.readySnapshot("shared")
	legit := a.restoringPod(a.ns, "clone", a.clone(a.ns, "clone", snap.Name), ref)
	other := a.namespace("other-")
	thief := a.restoringPod(other, "thief", a.clone(other, "thief", snap.Name), ref)

	want := fmt.Sprintf("pod %s/thief does not belong to a Sandbox that restores Snapshot %s/%s", other, other, snap.Name)
	a.refused("the thief's request", a.stage(ref, thief), want)
	if ans := a.stage(ref, legit); ans.Status != http.StatusOK || ans.Dir != ref.Location {
		t.Fatalf("the clone's request: HTTP %d %q dir %q, want 200 and %s", ans.Status, ans.Message, ans.Dir, ref.Location)
	}
	a.refused("a request naming no pod, the thief's on the node", a.stage(ref, nil), want)
	// A Snapshot of that name in the thief's namespace is the thief's own.
	own := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: snap.Name, Namespace: other},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "thief"}}}
	if err := a.c.Create(context.Background(), own); err != nil {
		t.Fatal(err)
	}
	a.refused("the thief's request, its own Snapshot of that name there", a.stage(ref, thief),
		fmt.Sprintf("Snapshot %s/%s has UID %s, not %s", other, snap.Name, own.UID, snap.UID))
	if err := a.c.Delete(context.Background(), thief, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if ans := a.stage(ref, nil); ans.Status != http.StatusOK || ans.Dir != ref.Location {
		t.Fatalf("a request naming no pod, the clone's alone: HTTP %d %q, want 200", ans.Status, ans.Message)
	}
}

// TestStageRefusesPodsNotPointedAtTheData: in the data's own namespace
// too, only a pod the controller made for a Sandbox restoring that data
// gets it.
func TestStageRefusesPodsNotPointedAtTheData(t *testing.T) {
	a := startAgent(t, nil)
	snap, ref := a.readySnapshot("base")
	elsewhere := a.clone(a.ns, "elsewhere", "another-snapshot")
	forged := ref
	forged.Name = "another-snapshot"
	a.refused("a pod of no Sandbox", a.stage(ref, a.restoringPod(a.ns, "orphan", nil, ref)), "no Sandbox or Template controls it")
	a.refused("a Sandbox restoring another Snapshot", a.stage(ref, a.restoringPod(a.ns, "other-source", elsewhere, ref)),
		"Sandbox elsewhere restores Snapshot another-snapshot")
	a.refused("annotations naming the UID under another name", a.stage(ref, a.restoringPod(a.ns, "renamed", elsewhere, forged)),
		"no Snapshot "+a.ns+"/another-snapshot exists")
	pod := a.restoringPod(a.ns, "impostor", a.clone(a.ns, "impostor", snap.Name), ref)
	fake := pod.DeepCopy()
	fake.UID = "not-the-pods-uid"
	a.refused("a request naming the pod with another UID", a.stage(ref, fake), "has UID "+string(pod.UID))
	onOther := a.restoringPod(a.ns, "on-other-node", a.clone(a.ns, "on-other-node", snap.Name), ref,
		func(p *corev1.Pod) { p.Spec.NodeName = "another-node" })
	a.refused("a pod of another node", a.stage(ref, onOther), `it is on node "another-node"`)
}

// TestStageTemplateBase: a template's warm pool pod and a sandbox of the
// template restore its base Snapshot; a pool pod of another template
// does not.
func TestStageTemplateBase(t *testing.T) {
	a := startAgent(t, nil)
	snap, ref := a.readySnapshot("python-base")
	python := a.template("python", snap.Name)
	other := a.template("go", "")
	if ans := a.stage(ref, a.restoringPod(a.ns, "python-pool-1", python, ref)); ans.Status != http.StatusOK {
		t.Errorf("the pool pod's request: HTTP %d %q, want 200", ans.Status, ans.Message)
	}
	sbx := a.sandbox("of-python", "ofpython000000000001") // a.sandbox's source is template python
	if ans := a.stage(ref, a.restoringPod(a.ns, "of-python", sbx, ref)); ans.Status != http.StatusOK {
		t.Errorf("the template sandbox's request: HTTP %d %q, want 200", ans.Status, ans.Message)
	}
	a.refused("another template's pool pod", a.stage(ref, a.restoringPod(a.ns, "go-pool-1", other, ref)),
		"it is no base Snapshot of Template go")
	// A base the template owns but its status no longer lists (a newer
	// one is Ready): its pods still starting may have it. Another node's,
	// its data not here: 404 past the check.
	older := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "go-base-old",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(other, sandlotv1.GroupVersion.WithKind("Template"))}},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: "go-builder"}}}
	a.create(older)
	oldRef := sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot, Name: older.Name, UID: string(older.UID), Location: "/elsewhere"}
	if ans := a.stage(oldRef, a.restoringPod(a.ns, "go-pool-2", other, oldRef)); ans.Status != http.StatusNotFound {
		t.Errorf("the older base's pool pod: HTTP %d %q, want past the check (404: no data here)", ans.Status, ans.Message)
	}
}

// template creates a Template whose status lists base (unless "") as its
// base Snapshot on the agent's node, as the controller writes it.
func (a *agent) template(name, base string) *sandlotv1.Template {
	a.t.Helper()
	tpl := &sandlotv1.Template{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: sandlotv1.TemplateSpec{Image: "python"}}
	a.create(tpl)
	if base != "" {
		a.setStatus(tpl, func() {
			tpl.Status.BaseSnapshots = []sandlotv1.BaseSnapshot{{Node: a.node, Revision: "r1", Phase: sandlotv1.BaseReady, Snapshot: base}}
		})
	}
	return tpl
}

// TestStagePausedSandbox: a resume restores the sandbox's own pause
// package, and no other sandbox's.
func TestStagePausedSandbox(t *testing.T) {
	a := startAgent(t, nil)
	sleeper := a.clone(a.ns, "sleeper", "any")
	// Another node's package: this agent leaves it alone, and its data is
	// not here (404 past the check).
	pkg := &sandlotv1.PausedSandbox{ObjectMeta: metav1.ObjectMeta{Name: "sleeper",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sleeper, sandlotv1.GroupVersion.WithKind("Sandbox"))}},
		Spec: sandlotv1.PausedSandboxSpec{SandboxID: "sleeper0000000000001", NodeName: "another-node", PodName: "sleeper"}}
	a.create(pkg)
	ref := sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindPausedSandbox, Name: pkg.Name, UID: string(pkg.UID), Location: "/elsewhere"}
	if ans := a.stage(ref, a.restoringPod(a.ns, "sleeper", sleeper, ref)); ans.Status != http.StatusNotFound {
		t.Errorf("the resume's request: HTTP %d %q, want past the check (404: no data here)", ans.Status, ans.Message)
	}
	nosy := a.clone(a.ns, "nosy", "any")
	a.refused("another sandbox's resume", a.stage(ref, a.restoringPod(a.ns, "nosy", nosy, ref)),
		"it is not Sandbox nosy's pause package")
}

// TestStageOwnSnapshotAfterNodeLost: a sandbox the controller restores
// on this node after its own was lost (status.restoringFrom) gets that
// Snapshot when it was taken of this sandbox, not another sandbox's
// Snapshot named there, nor a Snapshot its restoringFrom does not name.
func TestStageOwnSnapshotAfterNodeLost(t *testing.T) {
	a := startAgent(t, nil)
	snap, ref := a.readySnapshot("lost")
	src := &sandlotv1.Sandbox{}
	src.Name = "lost-src"
	if err := a.get(src); err != nil {
		t.Fatal(err)
	}
	a.setStatus(snap, func() { snap.Status.SandboxID = src.Status.SandboxID }) // as the controller writes it
	a.setStatus(src, func() { src.Status.RestoringFrom = snap.Name })
	if ans := a.stage(ref, a.restoringPod(a.ns, "lost-src-2", src, ref)); ans.Status != http.StatusOK {
		t.Errorf("the sandbox's own snapshot: HTTP %d %q, want 200", ans.Status, ans.Message)
	}
	other := a.sandbox("claims-it", "claimsit000000000001")
	a.setStatus(other, func() { other.Status.RestoringFrom = snap.Name })
	a.refused("another sandbox restoring it", a.stage(ref, a.restoringPod(a.ns, "claims-it", other, ref)),
		"Snapshot lost was not taken of Sandbox claims-it")
	a.setStatus(src, func() { src.Status.RestoringFrom = "another-snapshot" })
	a.refused("not the snapshot it restores from", a.stage(ref, a.restoringPod(a.ns, "lost-src-3", src, ref)),
		"Sandbox lost-src restores Snapshot another-snapshot")
}

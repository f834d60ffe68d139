package controllers_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestBuildStepCache plays the kubelet and the node agent through two
// builds: the first is checkpointed after each step; the second, with
// step 2 changed, restores its builder from step 1's checkpoint; once its
// base is Ready the first build's step 2 checkpoint goes, step 1's stays.
func TestBuildStepCache(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("cache-node", "16", "32Gi", nil)
	h.acceptedTemplate("built", 512)
	build := func(second string) func(*sandlotv1.TemplateSpec) {
		return func(spec *sandlotv1.TemplateSpec) {
			spec.Build = &sandlotv1.TemplateBuild{ID: "b-" + second, Steps: []sandlotv1.BuildStep{
				{Type: sandlotv1.StepRun, Args: []string{"one"}}, {Type: sandlotv1.StepRun, Args: []string{second}}}}
		}
	}
	h.editTemplate("built", build("two"))
	first, _ := h.runBuilder("built", "cache-node", 0, 1, 2)
	tpl := h.getTemplate("built")
	one, two := sandlotv1.BuildCheckpointName(tpl, "cache-node", 1), sandlotv1.BuildCheckpointName(tpl, "cache-node", 2)
	if owner := metav1.GetControllerOf(h.snapshot(one)); owner == nil || owner.UID != tpl.UID {
		t.Fatalf("checkpoint %s is not the template's: owner %v", one, owner)
	}
	h.gone(first)

	h.editTemplate("built", build("changed"))
	_, pod := h.runBuilder("built", "cache-node", 1, 2)
	if pod.Annotations[sandlotv1.AnnotationBoot] != sandlotv1.BootRestore ||
		pod.Annotations[sandlotv1.AnnotationRestoreName] != one {
		t.Fatalf("the second builder's pod boots %q from %q, want a restore of %s", pod.Annotations[sandlotv1.AnnotationBoot],
			pod.Annotations[sandlotv1.AnnotationRestoreName], one)
	}
	h.gone(&sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: two}})
	h.snapshot(one)
	h.snapshot(sandlotv1.BuildCheckpointName(h.getTemplate("built"), "cache-node", 2))
}

// runBuilder plays kubelet and agent for the template's current builder
// on node: it must start from step from; it asks for a checkpoint after
// each of steps, makes it Ready, then reports the build done and makes
// the base Ready. It returns the builder and its pod.
func (h *harness) runBuilder(tplName, node string, from int, steps ...int32) (*sandlotv1.Sandbox, *corev1.Pod) {
	h.t.Helper()
	tpl := h.getTemplate(tplName)
	name := h.builderOf(tpl)
	b := h.waitPhase(name, sandlotv1.SandboxStarting)
	if got := b.Annotations[sandlotv1.AnnotationBuildFromStep]; got != strconv.Itoa(from) && (from != 0 || got != "") {
		h.t.Fatalf("builder %s starts from step %q, want %d", name, got, from)
	}
	pod := h.pod(b.Status.PodName)
	h.setPod(b.Status.PodName, corev1.PodRunning, "10.99.0.2", func(st *corev1.PodStatus) {
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	})
	for _, n := range steps {
		h.setBuilt(name, metav1.ConditionFalse, sandlotv1.ReasonBuildCheckpoint, n)
		ckpt := sandlotv1.BuildCheckpointName(tpl, node, int(n))
		h.readyWhenAssigned(ckpt)
		if s := h.snapshot(ckpt); s.Spec.Source.Sandbox != name || s.Labels[sandlotv1.LabelBuildCheckpoint] != tplName {
			h.t.Fatalf("checkpoint %s: source %q labels %v", ckpt, s.Spec.Source.Sandbox, s.Labels)
		}
	}
	h.setBuilt(name, metav1.ConditionTrue, sandlotv1.ReasonBuildSucceeded, 0)
	h.readyWhenAssigned(name)
	h.basesOn(tplName, node)
	return b, pod
}

// builderOf waits for the builder of the template's current build.
func (h *harness) builderOf(tpl *sandlotv1.Template) string {
	h.t.Helper()
	var name string
	h.eventually(10*time.Second, "a builder of "+tpl.Name, func() error {
		list := &sandlotv1.SandboxList{}
		if err := h.c.List(context.Background(), list, client.InNamespace(h.ns)); err != nil {
			return err
		}
		for _, s := range list.Items {
			if s.Annotations[sandlotv1.AnnotationBaseOf] == tpl.Name && s.DeletionTimestamp == nil &&
				s.Annotations[sandlotv1.AnnotationBuildDigest] == sandlotv1.BuildDigest(tpl.Spec.Build) {
				name = s.Name
				return nil
			}
		}
		return fmt.Errorf("none of %d sandboxes", len(list.Items))
	})
	return name
}

// setBuilt plays the node agent reporting a builder's build.
func (h *harness) setBuilt(name string, status metav1.ConditionStatus, reason string, checkpoint int32) {
	h.t.Helper()
	h.eventually(5*time.Second, "set Built of "+name, func() error {
		s := h.sandbox(name)
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: sandlotv1.ConditionBuilt, Status: status,
			Reason: reason, Message: "m", ObservedGeneration: s.Generation})
		s.Status.BuildCheckpoint = checkpoint
		return h.c.Status().Update(context.Background(), s)
	})
}

// readyWhenAssigned waits for a Snapshot to be assigned its node, then
// plays the agent: its data is Ready there.
func (h *harness) readyWhenAssigned(name string) {
	h.t.Helper()
	h.eventually(10*time.Second, "snapshot "+name+" assigned", func() error {
		if s := h.snapshot(name); s.Status.NodeName == "" {
			return fmt.Errorf("no node yet")
		}
		return nil
	})
	h.setSnapshot(name, func(st *sandlotv1.SnapshotStatus) {
		st.Phase, st.Location, st.RemoteStatus = sandlotv1.DataReady, "store://"+name, sandlotv1.RemoteNotApplicable
	})
}

func (h *harness) snapshot(name string) *sandlotv1.Snapshot {
	h.t.Helper()
	s := &sandlotv1.Snapshot{}
	h.eventually(10*time.Second, "snapshot "+name, func() error { return h.c.Get(context.Background(), h.key(name), s) })
	return s
}

func (h *harness) getTemplate(name string) *sandlotv1.Template {
	h.t.Helper()
	tpl := &sandlotv1.Template{}
	if err := h.c.Get(context.Background(), h.key(name), tpl); err != nil {
		h.t.Fatal(err)
	}
	return tpl
}

// TestForgedCheckpointIgnored: a Snapshot a namespace user made under a
// checkpoint's name (labelled like one, Ready on the node, but not the
// Template's own) is never restored into a builder: it boots the image.
func TestForgedCheckpointIgnored(t *testing.T) {
	h := newHarness(t)
	h.runKubelet()
	startController(t)
	h.addNode("forge-node", "16", "32Gi", nil)
	tpl := h.acceptedTemplate("forged", 512)
	tpl = h.getTemplate(tpl.Name)
	tpl.Spec.Build = &sandlotv1.TemplateBuild{Steps: []sandlotv1.BuildStep{{Type: sandlotv1.StepRun, Args: []string{"one"}},
		{Type: sandlotv1.StepRun, Args: []string{"two"}}}}
	forged := h.readySnapshot(sandlotv1.BuildCheckpointName(tpl, "forge-node", 1), "forge-node", sandlotv1.RemoteNotApplicable, 512)
	patch := []byte(`{"metadata":{"labels":{"` + sandlotv1.LabelBuildCheckpoint + `":"` + tpl.Name + `"}}}`)
	if err := h.c.Patch(context.Background(), forged, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	h.editTemplate("forged", func(spec *sandlotv1.TemplateSpec) { spec.Build = tpl.Spec.Build })
	b := h.waitPhase(h.builderOf(h.getTemplate("forged")), sandlotv1.SandboxStarting)
	if from := b.Annotations[sandlotv1.AnnotationBuildFromStep]; from != "" {
		t.Fatalf("the builder starts from step %s of the forged checkpoint", from)
	}
	if pod := h.pod(b.Status.PodName); pod.Annotations[sandlotv1.AnnotationRestoreName] == forged.Name {
		t.Fatalf("the builder's pod restores the forged snapshot %s", forged.Name)
	}
}

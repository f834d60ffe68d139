package admission

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// restoreAnnotations are the annotations of a pod that restores another
// namespace's Snapshot, through the codec the controller writes them with.
func restoreAnnotations(t *testing.T) map[string]string {
	t.Helper()
	ann, err := sandlotv1.VMAnnotations{Restore: &sandlotv1.RestoreRef{Kind: sandlotv1.RestoreKindSnapshot,
		Name: "victim", UID: "3f0c7a52-9d4e-4c61-a0f3-5b8e2d7c9a10", Location: "/var/lib/sandlot/store/snapshots/victim"}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return ann
}

// TestTenantCannotSetSandlotKeys: alice, who may create pods in her
// namespace, cannot create one that restores a Snapshot by UID, nor one
// with any sandlot.dev/ label; the refusal names the key and the rule.
func TestTenantCannotSetSandlotKeys(t *testing.T) {
	cluster(t)
	c := as(t, alice)
	uid := "annotation " + sandlotv1.AnnotationRestoreUID
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want string // the key the refusal names
	}{
		"restore annotations": {podOf(nil, restoreAnnotations(t), true), uid},
		"restore-uid alone":   {podOf(nil, map[string]string{sandlotv1.AnnotationRestoreUID: "3f0c7a52"}, true), uid},
		"not of the sandlot RuntimeClass": {podOf(nil, map[string]string{sandlotv1.AnnotationBoot: sandlotv1.BootRestore,
			sandlotv1.AnnotationRestoreUID: "3f0c7a52"}, false), uid},
		// A volume of another namespace by its UID: the shim serves only the
		// pod's own namespace's, but the key is the controller's alone.
		"volumes annotation": {podOf(nil, map[string]string{sandlotv1.AnnotationVolumes: `[{"name":"data","uid":"3f0c7a52","path":"/mnt"}]`}, true),
			"annotation " + sandlotv1.AnnotationVolumes},
		"sandbox label": {podOf(map[string]string{sandlotv1.LabelSandbox: "someone-elses"}, nil, true),
			"label " + sandlotv1.LabelSandbox},
		"any sandlot.dev/ label": {podOf(map[string]string{"sandlot.dev/anything": ""}, nil, false), "label sandlot.dev/anything"},
		// An unclaimed pool pod's labels: the controller deletes such pods
		// to make room for starts, and counts them as room.
		"a pool pod's look": {podOf(map[string]string{sandlotv1.LabelSandbox: ""}, map[string]string{sandlotv1.AnnotationBoot: sandlotv1.BootSlot}, true),
			"label " + sandlotv1.LabelSandbox},
	} {
		t.Run(name, func(t *testing.T) {
			err := createProbe(c, tc.pod)
			if why := refusedWith(err, tc.want, refusal); why != nil {
				t.Fatal(why)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestWorkloadControllersCannotCopySandlotKeys: a Deployment whose pod
// template carries sandlot.dev/ keys gets no pods: the ReplicaSet
// controller's pod creation is refused like alice's would be.
func TestWorkloadControllersCannotCopySandlotKeys(t *testing.T) {
	cluster(t)
	rs := as(t, "system:serviceaccount:kube-system:replicaset-controller")
	err := createProbe(rs, podOf(map[string]string{sandlotv1.LabelSandbox: "web"}, nil, false))
	if why := refusedWith(err, "label "+sandlotv1.LabelSandbox, refusal); why != nil {
		t.Fatal(why)
	}
}

// TestTenantPlainPods: pods without sandlot.dev/ keys stay alice's to
// create, of the sandlot RuntimeClass too (admission.allowPlainRuntimeClassPods
// is true by default), with labels and annotations of other prefixes.
func TestTenantPlainPods(t *testing.T) {
	cluster(t)
	c := as(t, alice)
	for name, pod := range map[string]*corev1.Pod{
		"sandlot RuntimeClass": podOf(nil, nil, true),
		"other keys": podOf(map[string]string{"app": "web", "example.com/sandlot.dev": "x"},
			map[string]string{"notsandlot.dev/restore-uid": "x"}, true),
		"no RuntimeClass": podOf(nil, nil, false),
	} {
		t.Run(name, func(t *testing.T) {
			if err := createProbe(c, pod); err != nil {
				t.Fatalf("alice's pod refused: %v", err)
			}
		})
	}
}

// TestTenantCannotPatchSandlotKeys: on alice's own pod, and on a pod the
// controller made in her namespace, alice can neither add, change nor
// remove a sandlot.dev/ key; other metadata stays hers to change.
func TestTenantCannotPatchSandlotKeys(t *testing.T) {
	cluster(t)
	c := as(t, alice)
	own := podOf(nil, nil, true)
	if err := c.Create(context.Background(), own); err != nil {
		t.Fatalf("alice's pod: %v", err)
	}
	if err := refusedWith(patch(c, own, func(p *corev1.Pod) {
		p.Annotations = map[string]string{sandlotv1.AnnotationRestoreUID: "3f0c7a52"}
	}), "annotation "+sandlotv1.AnnotationRestoreUID, refusal); err != nil {
		t.Errorf("add a restore annotation: %v", err)
	}
	made := sandboxPod(t)
	if err := as(t, controllerUser).Create(context.Background(), made); err != nil {
		t.Fatalf("the controller's pod: %v", err)
	}
	for name, tc := range map[string]struct {
		mutate func(*corev1.Pod)
		want   string
	}{
		"change restore-uid": {func(p *corev1.Pod) { p.Annotations[sandlotv1.AnnotationRestoreUID] = "other" },
			"annotation " + sandlotv1.AnnotationRestoreUID},
		"remove the sandbox label": {func(p *corev1.Pod) { delete(p.Labels, sandlotv1.LabelSandbox) }, "label " + sandlotv1.LabelSandbox},
		"forge a claim": {func(p *corev1.Pod) { p.Annotations[sandlotv1.AnnotationClaimActivated] = "x" },
			"annotation " + sandlotv1.AnnotationClaimActivated},
		"forge a restore claim": {func(p *corev1.Pod) {
			p.Annotations[sandlotv1.AnnotationClaim] = `{"sandbox":"alice","sandboxID":"abcdefghij0123456789",` +
				`"restore":{"kind":"Snapshot","name":"bobs","uid":"3f0c7a52","location":"snapshots/3f0c7a52"}}`
		}, "annotation " + sandlotv1.AnnotationClaim},
		"change the network rules": {func(p *corev1.Pod) { p.Annotations[sandlotv1.AnnotationNetwork] = "{}" },
			"annotation " + sandlotv1.AnnotationNetwork},
		"forge the applied rules": {func(p *corev1.Pod) {
			p.Annotations[sandlotv1.AnnotationNetworkApplied] = p.Annotations[sandlotv1.AnnotationNetwork]
		}, "annotation " + sandlotv1.AnnotationNetworkApplied},
	} {
		t.Run(name, func(t *testing.T) {
			if err := refusedWith(patch(c, made, tc.mutate), tc.want, refusal); err != nil {
				t.Fatal(err)
			}
		})
	}
	if err := patch(c, made, func(p *corev1.Pod) { p.Labels["team"] = "a" }); err != nil {
		t.Errorf("alice's own label on a sandlot pod refused: %v", err)
	}
}

// TestControllerWritesSandlotKeys: the controller's service account
// creates sandbox and warm pool pods with their keys, changes a running
// pod's network rules (one annotation's merge patch) and claims a pool
// pod (annotations, labels and owner patched in one request), as
// controllers/ does.
func TestControllerWritesSandlotKeys(t *testing.T) {
	cluster(t)
	c := as(t, controllerUser)
	made := sandboxPod(t)
	if err := c.Create(context.Background(), made); err != nil {
		t.Fatalf("sandbox pod refused: %v", err)
	}
	raw := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+sandlotv1.AnnotationNetwork+`":"{\"denyOut\":[\"10.0.0.0/8\"]}"}}}`))
	if err := c.Patch(context.Background(), made, raw); err != nil {
		t.Fatalf("network rules change refused: %v", err)
	}
	raw = client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+sandlotv1.AnnotationNetwork+`":null}}}`))
	if err := c.Patch(context.Background(), made, raw); err != nil {
		t.Fatalf("network rules removal refused: %v", err)
	}
	pool := poolPod(t)
	if err := c.Create(context.Background(), pool); err != nil {
		t.Fatalf("pool pod refused: %v", err)
	}
	if err := claim(c, pool); err != nil {
		t.Fatalf("claim refused: %v", err)
	}
}

// TestAgentRecordsClaimsOnly: the node agent may record the claim it
// carried out (sandlot.dev/claim-activated) and the rules it applied
// (sandlot.dev/network-applied), and nothing else.
func TestAgentRecordsClaimsOnly(t *testing.T) {
	cluster(t)
	pool := poolPod(t)
	ctrl := as(t, controllerUser)
	if err := ctrl.Create(context.Background(), pool); err != nil {
		t.Fatalf("pool pod: %v", err)
	}
	if err := claim(ctrl, pool); err != nil {
		t.Fatalf("claim: %v", err)
	}
	agent := asAgentOn(t, pool.Spec.NodeName)
	if err := refusedWith(patch(agent, pool, func(p *corev1.Pod) { p.Annotations[sandlotv1.AnnotationRestoreUID] = "other" }),
		"annotation "+sandlotv1.AnnotationRestoreUID, refusal); err != nil {
		t.Errorf("agent changing restore-uid: %v", err)
	}
	if err := patch(agent, pool, func(p *corev1.Pod) {
		p.Annotations[sandlotv1.AnnotationClaimActivated] = p.Annotations[sandlotv1.AnnotationClaim]
	}); err != nil {
		t.Errorf("agent recording the claim refused: %v", err)
	}
	if err := refusedWith(patch(agent, pool, func(p *corev1.Pod) { p.Annotations[sandlotv1.AnnotationNetwork] = "{}" }),
		"annotation "+sandlotv1.AnnotationNetwork, refusal); err != nil {
		t.Errorf("agent changing the rules to enforce: %v", err)
	}
	for _, step := range []struct {
		name   string
		mutate func(*corev1.Pod)
	}{
		{"set", func(p *corev1.Pod) {
			p.Annotations[sandlotv1.AnnotationNetworkApplied] = p.Annotations[sandlotv1.AnnotationNetwork]
		}},
		{"change", func(p *corev1.Pod) { p.Annotations[sandlotv1.AnnotationNetworkApplied] = "{}" }},
		{"remove", func(p *corev1.Pod) { delete(p.Annotations, sandlotv1.AnnotationNetworkApplied) }},
	} {
		if err := patch(agent, pool, step.mutate); err != nil {
			t.Errorf("agent recording the applied rules (%s) refused: %v", step.name, err)
		}
	}
}

// TestSubresourcesCannotWriteSandlotKeys: a status update writes a pod's
// labels and annotations too, and a binding's annotations are merged into
// the pod's: neither carries sandlot.dev/ keys but the controller's, not
// even a cluster admin's. The kubelet's status writes and the scheduler's
// bindings, which carry none, go through.
func TestSubresourcesCannotWriteSandlotKeys(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	made := sandboxPod(t)
	if err := as(t, controllerUser).Create(ctx, made); err != nil {
		t.Fatalf("the controller's pod: %v", err)
	}
	forged := made.DeepCopy()
	forged.Annotations[sandlotv1.AnnotationRestoreUID] = "other"
	if err := refusedWith(e.Client.Status().Update(ctx, forged), "annotation "+sandlotv1.AnnotationRestoreUID, refusal); err != nil {
		t.Errorf("admin's status update of restore-uid: %v", err)
	}
	running := made.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	if err := e.Client.Status().Update(ctx, running); err != nil {
		t.Errorf("a status update of the phase refused: %v", err)
	}
	unbound := podOf(nil, nil, true)
	if err := e.Client.Create(ctx, unbound); err != nil {
		t.Fatal(err)
	}
	bind := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: unbound.Name, Namespace: tenantNS,
		Annotations: map[string]string{sandlotv1.AnnotationRestoreUID: "3f0c7a52"}}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	if err := refusedWith(e.Client.SubResource("binding").Create(ctx, unbound, bind), "annotation "+sandlotv1.AnnotationRestoreUID, refusal); err != nil {
		t.Errorf("admin's binding with restore-uid: %v", err)
	}
	bind.Annotations = nil
	if err := e.Client.SubResource("binding").Create(ctx, unbound, bind); err != nil {
		t.Errorf("a plain binding refused: %v", err)
	}
}

// patch merge-patches pod as c after mutate, on a fresh copy, so that a
// refused patch leaves pod as it was.
func patch(c client.Client, pod *corev1.Pod, mutate func(*corev1.Pod)) error {
	cur := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), cur); err != nil {
		return err
	}
	orig := cur.DeepCopy()
	cur.Labels, cur.Annotations = maps.Clone(cur.Labels), maps.Clone(cur.Annotations)
	mutate(cur)
	return c.Patch(context.Background(), cur, client.MergeFrom(orig))
}

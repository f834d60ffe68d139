package admission

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// TestAgentWritesBuildLogsOnly: the node agent's RBAC lets it create and
// patch ConfigMaps anywhere (for build logs); the chart's policy refuses
// every other ConfigMap write of its: kube-system's DNS configuration, a
// tenant's ConfigMap relabelled as a log, a delete. Its own build log
// goes through, created and then rewritten by server-side apply.
func TestAgentWritesBuildLogsOnly(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	agent := as(t, agentUser)
	const word = "writes only template build logs"
	waitEnforced(t, "the policy refuses the agent's ConfigMap", func() error {
		return agent.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: tenantNS}})
	}, word)
	for name, cm := range map[string]*corev1.ConfigMap{
		"kube-system's DNS":            {ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"}, Data: map[string]string{"Corefile": ". { forward . 6.6.6.6 }"}},
		"a log name without the label": {ObjectMeta: metav1.ObjectMeta{Name: "app-log", Namespace: tenantNS}},
		"the label on another name":    {ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: tenantNS, Labels: map[string]string{sandlotv1.LabelBuildLog: "t"}}},
	} {
		if err := refusedWith(agent.Create(ctx, cm), word); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A tenant's own ConfigMap named like a log: the agent may not take it over.
	own := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings-log", Namespace: tenantNS}, Data: map[string]string{"k": "v"}}
	if err := e.Client.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	if err := refusedWith(applyLog(ctx, agent, own.Name), word); err != nil {
		t.Errorf("relabelling a tenant's ConfigMap: %v", err)
	}
	if err := applyLog(ctx, agent, "tpl-base-1-log"); err != nil {
		t.Fatalf("the agent's build log refused: %v", err)
	}
	if err := applyLog(ctx, agent, "tpl-base-1-log"); err != nil {
		t.Fatalf("the agent's build log rewritten: %v", err)
	}
	log := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tpl-base-1-log", Namespace: tenantNS}}
	if err := refusedWith(agent.Delete(ctx, log)); err != nil { // RBAC grants no delete; the policy refuses one too
		t.Errorf("the agent deleting a ConfigMap: %v", err)
	}
}

// applyLog writes a build log as the agent does (server-side apply).
func applyLog(ctx context.Context, c client.Client, name string) error {
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenantNS, Labels: map[string]string{sandlotv1.LabelBuildLog: "tpl"}},
		Data:       map[string]string{sandlotv1.BuildLogKey: "{}\n"}}
	return c.Patch(ctx, cm, client.Apply, client.FieldOwner("sandlot-agent-build"), client.ForceOwnership)
}

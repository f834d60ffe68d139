package isolation

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// asNodeAgent is a client with the credentials root on node finds there:
// the token of the agent pod the chart runs on it (requested for that
// pod, as the kubelet projects it: the same service account, bound to the
// same pod and node).
func asNodeAgent(t *testing.T, k client.Client, node string) client.Client {
	t.Helper()
	agent, err := c.AgentPod(node)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agent.Name, UID: agent.UID}}}
	tok, err := cs.CoreV1().ServiceAccounts(agent.Namespace).CreateToken(context.Background(), agent.Spec.ServiceAccountName, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of the agent pod %s: %v", agent.Name, err)
	}
	admin, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tok.Status.Token
	as, err := client.New(cfg, client.Options{Scheme: k.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// checkNodeReadsNoToken (row 8): root on a node, holding its agent's
// credentials, reads no sandbox's envd token — not even one of its own
// node (RBAC cannot narrow a read to a node, so the agent may read no
// Secret at all) — and the claimed pod's annotations hold the token only
// sealed to the node's key.
func checkNodeReadsNoToken(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: sbx.Namespace, Name: sandlotv1.TokenSecretName(sbx.Name)}
	if err := k.Get(ctx, key, secret); err != nil {
		t.Fatal(err)
	}
	token := string(secret.Data[sandlotv1.TokenSecretKey])
	for name, v := range pod.Annotations {
		if token == "" || strings.Contains(v, token) {
			t.Errorf("pool pod %s's annotation %s holds the sandbox's envd token in the clear", pod.Name, name)
		}
	}
	as := asNodeAgent(t, k, sbx.Status.NodeName)
	if err := as.Get(ctx, key, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node agent's credentials read Secret %s: %v, want Forbidden", key, err)
	}
	if err := as.List(ctx, &corev1.SecretList{}, client.InNamespace(sbx.Namespace)); !apierrors.IsForbidden(err) {
		t.Errorf("the node agent's credentials list Secrets in %s: %v, want Forbidden", sbx.Namespace, err)
	}
	// The credentials work: the agent reads its node's sandboxes.
	if err := as.Get(ctx, client.ObjectKeyFromObject(sbx), &sandlotv1.Sandbox{}); err != nil {
		t.Errorf("the node agent's credentials do not read Sandbox %s: %v (the test's token is not the agent's)", sbx.Name, err)
	}
}

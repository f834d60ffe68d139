// Package admission tests the chart's ValidatingAdmissionPolicy
// (charts/sandlot/templates/admission.yaml) on a real kube-apiserver
// (envtest): the chart rendered with the Helm SDK, its policy, binding
// and RBAC applied, and requests made as a tenant (alice, the built-in
// edit role in namespace tenant) and as sandlot's service accounts, by
// impersonation. The policy's CEL is only ever judged by the API server
// that runs it: no render test can tell a wrong expression, and envtest
// runs no kube-controller-manager to write the policy's type-checking
// status, so every expression is run here, on CREATE and UPDATE, to an
// admission and to a refusal.
package admission

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/kube"
)

const (
	tenantNS = "tenant"
	alice    = "alice"
	// policy is the chart's ValidatingAdmissionPolicy (and binding).
	policy = "sandlot-pod-keys"
	// configMapPolicy limits the agent's ConfigMap writes to build logs.
	configMapPolicy = "sandlot-agent-configmaps"
	// networkPolicy refuses an allowOut inside the platform's denials.
	networkPolicy = "sandlot-sandbox-network"
	// agentNodePolicy holds each node's agent to its node's objects.
	agentNodePolicy = "sandlot-agent-node"
	// plainRefusal is its word with admission.allowPlainRuntimeClassPods false.
	plainRefusal = "runtimeClassName sandlot: only sandlot's controller"
	// enforced bounds how long the API server takes to enforce a policy
	// it was given (its policy informer).
	enforced = 30 * time.Second
)

var (
	controllerUser = kube.ServiceAccountUser("sandlot-controller")
	agentUser      = kube.ServiceAccountUser("sandlot-agent")
	// refusal is what the policy says to everyone but the controller.
	refusal = "only sandlot's controller (" + controllerUser +
		") may set, change or remove the sandlot.dev/ labels and annotations of pods"
)

var (
	envOnce sync.Once
	env     *kube.Env
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// cluster starts the API server once for the package with the chart's
// RBAC and admission policy (default values) enforced, and alice an
// editor of namespace tenant.
func cluster(t *testing.T) *kube.Env {
	t.Helper()
	envOnce.Do(func() {
		if env, envErr = kube.Start(); envErr == nil {
			envErr = setUp(context.Background(), env)
		}
	})
	if envErr != nil {
		t.Fatalf("%v (the assets come from `make envtest-assets`)", envErr)
	}
	waitEnforced(t, "the policy refuses alice's sandlot.dev/ label", func() error {
		return createProbe(as(t, alice), podOf(map[string]string{sandlotv1.LabelSandbox: "probe"}, nil, false))
	}, refusal)
	return env
}

func setUp(ctx context.Context, e *kube.Env) error {
	// Evictions: a CREATE on a pod's subresource the policy must admit.
	if err := policyv1.AddToScheme(e.Scheme); err != nil {
		return err
	}
	rbac, err := kube.ChartRBAC(nil)
	if err != nil {
		return err
	}
	if err := kube.ApplyRBAC(ctx, e.Client, rbac); err != nil {
		return err
	}
	if err := applyPolicy(ctx, e.Client, nil); err != nil {
		return err
	}
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}); err != nil {
		return fmt.Errorf("create namespace %s: %w", tenantNS, err)
	}
	if err := aggregate(ctx, e.Client, "edit"); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-edit", Namespace: tenantNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: alice}}}
	if err := e.Client.Create(ctx, rb); err != nil {
		return fmt.Errorf("bind edit to %s in %s: %w", alice, tenantNS, err)
	}
	return nil
}

// applyPolicy creates or updates the chart's policy and binding rendered
// with vals.
func applyPolicy(ctx context.Context, c client.Client, vals map[string]any) error {
	objs, err := kube.ChartObjects(vals, kube.AdmissionKinds...)
	if err != nil {
		return err
	}
	names := []string{policy, configMapPolicy, networkPolicy, agentNodePolicy}
	if len(objs) != 2*len(names) {
		return fmt.Errorf("the chart renders %d admission objects, want %v and their bindings", len(objs), names)
	}
	for _, o := range objs {
		if !slices.Contains(names, o.GetName()) {
			return fmt.Errorf("%s %s: want one of %v", o.GetKind(), o.GetName(), names)
		}
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(o.GroupVersionKind())
		err := c.Get(ctx, client.ObjectKeyFromObject(o), cur)
		switch {
		case apierrors.IsNotFound(err):
			err = c.Create(ctx, o)
		case err == nil:
			o.SetResourceVersion(cur.GetResourceVersion())
			err = c.Update(ctx, o)
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// aggregate fills an aggregated ClusterRole's rules as kube-controller-
// manager's clusterrole-aggregation controller does (envtest runs none):
// the built-in edit role is empty until then.
func aggregate(ctx context.Context, c client.Client, name string) error {
	role := &rbacv1.ClusterRole{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, role); err != nil {
		return fmt.Errorf("the API server's bootstrap ClusterRole %s: %w", name, err)
	}
	if role.AggregationRule == nil {
		return nil
	}
	role.Rules = nil
	for _, sel := range role.AggregationRule.ClusterRoleSelectors {
		parts := &rbacv1.ClusterRoleList{}
		if err := c.List(ctx, parts, client.MatchingLabels(sel.MatchLabels)); err != nil {
			return fmt.Errorf("ClusterRoles aggregated into %s: %w", name, err)
		}
		for _, p := range parts.Items {
			if p.Name != name {
				role.Rules = append(role.Rules, p.Rules...)
			}
		}
	}
	if len(role.Rules) == 0 {
		return fmt.Errorf("ClusterRole %s aggregates no rules", name)
	}
	if err := c.Update(ctx, role); err != nil {
		return fmt.Errorf("aggregate ClusterRole %s: %w", name, err)
	}
	return nil
}

// as is a client that impersonates user: alice, or a sandlot service
// account with the groups its token carries.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	return asWith(t, rest.ImpersonationConfig{UserName: user})
}

// asAgentOn is the node agent with the token of its pod on node: the API
// server names the pod's node in the request's extra.
func asAgentOn(t *testing.T, node string) client.Client {
	t.Helper()
	return asWith(t, rest.ImpersonationConfig{UserName: agentUser,
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {node}}})
}

func asWith(t *testing.T, imp rest.ImpersonationConfig) client.Client {
	t.Helper()
	user := imp.UserName
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = imp
	if sa, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		ns, _, _ := strings.Cut(sa, ":")
		cfg.Impersonate.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatalf("client as %s: %v", user, err)
	}
	return c
}

// podOf is a pod in namespace tenant (generated name) with labels and
// annotations, of the sandlot RuntimeClass if sandlot.
func podOf(labels, annotations map[string]string, sandlot bool) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "pod-", Namespace: tenantNS, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: sandlotv1.ContainerName, Image: "sandbox"}}}}
	if sandlot {
		pod.Spec.RuntimeClassName = ptr.To(sandlotv1.RuntimeClassName)
	}
	return pod
}

// createProbe creates pod and, if admitted, deletes it again (a probe of
// what the API server enforces leaves nothing behind).
func createProbe(c client.Client, pod *corev1.Pod) error {
	if err := c.Create(context.Background(), pod); err != nil {
		return err
	}
	return env.Client.Delete(context.Background(), pod)
}

// waitEnforced polls probe until the API server refuses it with want: a
// policy's enforcement follows its creation or update asynchronously.
func waitEnforced(t *testing.T, what string, probe func() error, want string) {
	t.Helper()
	poll.Eventually(t, enforced, what, func() error {
		err := probe()
		if err == nil {
			return errors.New("admitted")
		}
		return refusedWith(err, want)
	})
}

// refusedWith says why err is not the API server's Forbidden naming want.
func refusedWith(err error, want ...string) error {
	return refusedAs(err, apierrors.IsForbidden, "Forbidden", want...)
}

// invalidWith says why err is not the API server's Invalid (422) naming
// want: a policy whose reason is Invalid.
func invalidWith(err error, want ...string) error {
	return refusedAs(err, apierrors.IsInvalid, "Invalid (422)", want...)
}

// refusedAs says why err is not a refusal of that kind (is) naming want.
func refusedAs(err error, is func(error) bool, kind string, want ...string) error {
	if err == nil {
		return errors.New("admitted, want refused")
	}
	if !is(err) {
		return fmt.Errorf("%w: want %s", err, kind)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			return fmt.Errorf("refused with %q, want it to say %q", err.Error(), w)
		}
	}
	return nil
}

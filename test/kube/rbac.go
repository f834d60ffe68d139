package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ReleaseNamespace is where the chart installs sandlot's service accounts.
const ReleaseNamespace = "sandlot-system"

// Components are sandlot's service accounts, as the chart names them.
var Components = []string{"sandlot-controller", "sandlot-agent", "sandlot-api"}

// rbacKinds are the objects of the chart that grant sandlot's rights.
var rbacKinds = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// AdmissionKinds are the chart's admission objects (templates/admission.yaml).
var AdmissionKinds = []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// ChartRBAC renders charts/sandlot with vals (merged over the chart's
// defaults, as helm install does) and returns only its service accounts,
// roles and bindings: what a suite installs so that sandlot's components
// run with exactly the rights the chart gives them, never admin's.
func ChartRBAC(vals map[string]any) ([]*unstructured.Unstructured, error) {
	return ChartObjects(vals, rbacKinds...)
}

// ChartObjects renders charts/sandlot with vals as ChartRBAC does and
// returns its objects of the given kinds, in the manifest's order.
func ChartObjects(vals map[string]any, kinds ...string) ([]*unstructured.Unstructured, error) {
	ch, err := loader.Load(filepath.Join(Root(), "charts", "sandlot"))
	if err != nil {
		return nil, fmt.Errorf("load the chart: %w", err)
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly = true, true
	inst.ReleaseName, inst.Namespace = "sandlot", ReleaseNamespace
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.0", Major: "1", Minor: "37"}
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render the chart: %w", err)
	}
	var out []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(rel.Manifest)), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode the chart's manifest: %w", err)
		}
		if slices.Contains(kinds, u.GetKind()) {
			out = append(out, u)
		}
	}
}

// ApplyRBAC creates the release namespace and objs (from ChartRBAC),
// leaving those that exist.
func ApplyRBAC(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ReleaseNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ReleaseNamespace, err)
	}
	for _, o := range objs {
		if err := c.Create(ctx, o.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// ComponentConfig is a client config that authenticates as a sandlot
// component's service account (its user name and groups), with the
// chart's RBAC installed first (values: Env.ChartValues, the chart's
// defaults when nil).
func (e *Env) ComponentConfig(component string) (*rest.Config, error) {
	user, err := e.componentUser(component)
	if err != nil {
		return nil, err
	}
	cfg := user.Config()
	// As the binaries' ctrl.GetConfig() sets it: no client-side rate limit
	// (the API server's fairness rules). An unset QPS is client-go's 5/s,
	// which would throttle the component under test.
	cfg.QPS = -1
	return cfg, nil
}

// componentUser installs the chart's RBAC (once) and adds the envtest
// user of a component's service account.
func (e *Env) componentUser(component string) (*envtest.AuthenticatedUser, error) {
	e.rbacOnce.Do(func() {
		objs, err := ChartRBAC(e.ChartValues)
		if err == nil {
			err = ApplyRBAC(context.Background(), e.Client, objs)
		}
		e.rbacErr = err
	})
	if e.rbacErr != nil {
		return nil, e.rbacErr
	}
	user, err := e.AddUser(envtest.User{Name: ServiceAccountUser(component),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ReleaseNamespace, "system:authenticated"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add envtest user %s: %w", component, err)
	}
	return user, nil
}

// ServiceAccountUser is the user name the API server gives a component's
// service account token.
func ServiceAccountUser(component string) string {
	return "system:serviceaccount:" + ReleaseNamespace + ":" + component
}

// Package kube starts a real kube-apiserver and etcd (controller-runtime's
// envtest, binaries built from Go modules by hack/k8s-bins.sh) with
// sandlot's CRDs and RuntimeClass installed, for tests.
package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Env is a running API server with sandlot installed.
type Env struct {
	*envtest.Environment
	Config *rest.Config
	Client client.Client
	Scheme *k8sruntime.Scheme

	// ChartValues render the chart's RBAC the components run under (set
	// before the first ComponentConfig; nil: the chart's defaults).
	ChartValues map[string]any

	rbacOnce sync.Once
	rbacErr  error
}

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Start starts etcd and kube-apiserver, installs the CRDs from
// config/crd/bases and the RuntimeClass from config/runtimeclass.
func Start() (*Env, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run `make envtest-assets` (it builds etcd and " +
			"kube-apiserver from Go modules into $SANDLOT_CACHE) or run the tests with `make test`")
	}
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme, nodev1.AddToScheme, policyv1.AddToScheme, rbacv1.AddToScheme, eventsv1.AddToScheme, sandlotv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(Root(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest (assets in %s): %w", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	e := &Env{Environment: env, Config: cfg, Client: c, Scheme: scheme}
	if err := e.ApplyFile(filepath.Join(Root(), "config", "runtimeclass", "runtimeclass.yaml"), &nodev1.RuntimeClass{}); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return e, nil
}

// ApplyFile creates the single object of a YAML file, decoded into obj.
func (e *Env) ApplyFile(path string, obj client.Object) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(obj); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	if err := e.Client.Create(context.Background(), obj); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}

// Kubeconfig writes an admin kubeconfig for the API server into dir.
func (e *Env) Kubeconfig(dir string) (string, error) {
	user, err := e.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("add envtest user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

package cluster

// sandlot's components run in a harness cluster as the service accounts
// the Helm chart installs, with the chart's roles and bindings: admin
// credentials would hide a missing grant (a warm pool claim once failed
// in the installed product only, for a pod patch the chart did not grant).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/sandlot-dev/sandlot/test/kube"
)

// installRBAC applies the chart's service accounts, roles and bindings
// and its admission policy for the cluster's values (a chart install
// brings its own): sandlot runs as the chart installs it, pods guarded.
func (c *Cluster) installRBAC() error {
	if c.Chart {
		return nil
	}
	objs, err := kube.ChartRBAC(c.ChartValues())
	if err != nil {
		return err
	}
	policy, err := kube.ChartObjects(c.ChartValues(), kube.AdmissionKinds...)
	if err != nil {
		return err
	}
	objs = append(objs, policy...)
	var docs []string
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		docs = append(docs, string(b))
	}
	path := filepath.Join(c.Dir, "sandlot-rbac.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ns := range append([]string{kube.ReleaseNamespace}, c.Teams...) {
		if _, err := c.Kubectl(ctx, "get", "namespace", ns); err != nil {
			if _, err := c.Kubectl(ctx, "create", "namespace", ns); err != nil {
				return err
			}
		}
	}
	_, err = c.Kubectl(ctx, "apply", "-f", path)
	return err
}

// componentKubeconfig writes a kubeconfig that authenticates as a
// component's service account (a token from the TokenRequest API, as a
// pod's projected token) and returns its path.
func (c *Cluster) componentKubeconfig(component string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	token, err := c.Kubectl(ctx, "-n", kube.ReleaseNamespace, "create", "token", component, "--duration=48h")
	if err != nil {
		return "", err
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return "", fmt.Errorf("read the admin kubeconfig: %w", err)
	}
	ctxName := cfg.CurrentContext
	kctx := cfg.Contexts[ctxName]
	if kctx == nil {
		return "", fmt.Errorf("kubeconfig %s: no current context", c.Kubeconfig)
	}
	cfg.AuthInfos = map[string]*clientcmdapi.AuthInfo{component: {Token: strings.TrimSpace(token)}}
	kctx.AuthInfo = component
	path := filepath.Join(c.Dir, component+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

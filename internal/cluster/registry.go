package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandlot-dev/sandlot/internal/crienv"
	"github.com/sandlot-dev/sandlot/internal/oci"
)

// RegistryVersion is the CNCF Distribution registry hack/registry-bins.sh
// builds.
const RegistryVersion = "v3.1.2"

// registryPort is the local registry's port on the API bridge.
const registryPort = 5000

// RegistryHost is the cluster's OCI registry (host:port): the kubelets
// pull sandlot's images from it, over HTTP (each node's containerd has a
// hosts.toml for it), with the chart's image.registry value.
func (c *Cluster) RegistryHost() string { return fmt.Sprintf("%s:%d", c.apiIP, registryPort) }

// registryConfig is the registry's config: its blobs under the cluster
// directory (a fresh store each start), listening on the API bridge.
const registryConfig = `version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`

// registry starts the cluster's OCI registry.
func (c *Cluster) registry(t crienv.T) error {
	bin := filepath.Join(cacheDir(), "registry", RegistryVersion, "registry")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("registry not found in %s: run `make registry-bins`", filepath.Dir(bin))
	}
	dir := filepath.Join(c.Dir, "registry")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, registryConfig, filepath.Join(dir, "data"), c.RegistryHost()), 0o644); err != nil {
		return err
	}
	p, err := c.start(t, "registry", bin, []string{"serve", cfg})
	if err != nil {
		return err
	}
	return p.waitFor(30*time.Second, "/v2/", func() error { return httpOK("http://" + c.RegistryHost() + "/v2/") })
}

// pushImages pushes `make image`'s archives to the cluster's registry,
// as a release's are pushed to the registry its users name.
func (c *Cluster) pushImages(tag string) error {
	return c.pushArchives(tag, func(name string) string { return filepath.Join(c.BinDir, "images", name+".tar") })
}

// pushArchives pushes each image's archive (archive(name)) as
// <registry>/sandlot/<name>:<tag>.
func (c *Cluster) pushArchives(tag string, archive func(name string) string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, name := range ImageNames {
		ref := c.RegistryHost() + "/" + imageRepository + name + ":" + tag
		digest, err := oci.Push(ctx, archive(name), ref, true)
		if err != nil {
			return fmt.Errorf("%w (make image)", err)
		}
		c.logf("cluster: pushed %s@%s", ref, digest)
	}
	return nil
}

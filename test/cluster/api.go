package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// APIPort is where StartAPI serves sandlot-api (plain HTTP) on the API bridge.
const APIPort = 3000

// StartAPI runs sandlot-api from BinDir against the cluster, listening on
// the API bridge address, with extra flags; it returns the base URL. It
// lives as long as the cluster.
func (c *Cluster) StartAPI(args ...string) (string, error) {
	addr := fmt.Sprintf("%s:%d", c.apiIP, APIPort)
	kc, err := c.componentKubeconfig("sandlot-api")
	if err != nil {
		return "", err
	}
	p, err := c.start(c.t, "sandlot-api", filepath.Join(c.BinDir, "sandlot-api"),
		append([]string{"--listen=" + addr}, args...), "KUBECONFIG="+kc)
	if err != nil {
		return "", err
	}
	url := "http://" + addr
	if err := p.waitFor(60*time.Second, "health", func() error { return httpOK(url + "/health") }); err != nil {
		return "", err
	}
	return url, nil
}

// APIAddress is the address sandlot-api's listeners bind on (the API bridge).
func (c *Cluster) APIAddress() string { return c.apiIP }

// IssueAPIKey runs `sandlot-api issue-key` against the cluster and returns the key.
func (c *Cluster) IssueAPIKey(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "sandlot-api"), append([]string{"issue-key"}, args...)...)
	cmd.Env = []string{"KUBECONFIG=" + c.Kubeconfig}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("sandlot-api issue-key: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

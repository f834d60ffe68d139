// Package mcp is the MCP gateway's configuration: what E2B's SDKs send as
// `mcp` on Sandbox.create and hand to `mcp-gateway --config` in the
// sandbox. The E2B API checks it before a sandbox exists; the gateway in
// the template (guest/mcpgateway) runs it.
//
// sandlot's gateway runs the SDK's GitHub servers
// (`"github/<owner>/<repo>": {runCmd, installCmd?, envs?}`): it clones the
// repository, runs installCmd in it, and runs runCmd as a stdio MCP
// server. Docker's MCP catalog servers (every other key) are container
// images E2B's gateway runs with Docker inside the sandbox; a sandlot
// sandbox runs no container engine, so they are refused by name.
package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Port is the gateway's port in the sandbox (the SDKs' mcpPort); the
// SDKs' MCP URL is https://<Port>-<sandboxID>.<domain>/mcp.
const Port = 50005

// Path is where the gateway answers MCP's streamable HTTP transport.
const Path = "/mcp"

// TokenFile holds the gateway's access token (root only); the SDKs read
// it when they did not make the token themselves (Sandbox.connect).
const TokenFile = "/etc/mcp-gateway/.token"

// TokenEnv is the variable the SDKs pass the token in.
const TokenEnv = "GATEWAY_ACCESS_TOKEN"

// Limits: a create body carries the whole configuration.
const (
	maxServers = 16
	maxCmd     = 4096
	maxEnvs    = 64
	maxEnvLen  = 4096
)

// Server is one MCP server the gateway runs.
type Server struct {
	// Key is the configuration's key: github/<owner>/<repo>.
	Key        string
	Owner      string
	Repo       string
	RunCmd     string
	InstallCmd string
	Envs       map[string]string
}

// CloneURL is the repository's address (git's url.<base>.insteadOf
// redirects it, e.g. to a mirror).
func (s Server) CloneURL() string {
	return "https://github.com/" + s.Owner + "/" + s.Repo
}

// githubKey: GitHub's owner and repository name characters.
var githubKey = regexp.MustCompile(`^github/([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]{1,100})$`)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// githubServer is a GitHub server's value, as the SDKs type it.
type githubServer struct {
	RunCmd     string            `json:"runCmd"`
	InstallCmd string            `json:"installCmd,omitempty"`
	Envs       map[string]string `json:"envs,omitempty"`
}

// Parse reads a configuration, each server in key order, or says what
// is wrong with it, naming the key.
func Parse(raw []byte) ([]Server, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("the MCP configuration must be a JSON object of servers")
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("the MCP configuration names no server")
	}
	if len(m) > maxServers {
		return nil, fmt.Errorf("the MCP configuration names %d servers, at most %d", len(m), maxServers)
	}
	var out []Server
	for _, key := range slices.Sorted(maps.Keys(m)) {
		s, err := parseServer(key, m[key])
		if err != nil {
			return nil, fmt.Errorf("MCP server %q: %w", key, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseServer(key string, raw json.RawMessage) (Server, error) {
	match := githubKey.FindStringSubmatch(key)
	if match == nil || match[2] == "." || match[2] == ".." {
		if strings.HasPrefix(key, "github/") {
			return Server{}, fmt.Errorf("not github/<owner>/<repo>")
		}
		return Server{}, fmt.Errorf("a server of Docker's MCP catalog, which E2B's gateway runs as a container; " +
			"sandlot's sandboxes run no container engine: use a \"github/<owner>/<repo>\" server with a runCmd")
	}
	var v githubServer
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return Server{}, fmt.Errorf("want {runCmd, installCmd?, envs?}: %w", err)
	}
	if strings.TrimSpace(v.RunCmd) == "" {
		return Server{}, fmt.Errorf("runCmd is required (the command that starts a stdio MCP server)")
	}
	if len(v.RunCmd) > maxCmd || len(v.InstallCmd) > maxCmd {
		return Server{}, fmt.Errorf("runCmd and installCmd take at most %d bytes", maxCmd)
	}
	if err := checkEnvs(v.Envs); err != nil {
		return Server{}, err
	}
	return Server{Key: key, Owner: match[1], Repo: match[2], RunCmd: v.RunCmd, InstallCmd: v.InstallCmd, Envs: v.Envs}, nil
}

func checkEnvs(envs map[string]string) error {
	if len(envs) > maxEnvs {
		return fmt.Errorf("%d envs, at most %d", len(envs), maxEnvs)
	}
	for k, v := range envs {
		if !envName.MatchString(k) {
			return fmt.Errorf("envs: %q is not a variable name", k)
		}
		if len(v) > maxEnvLen || strings.ContainsRune(v, 0) {
			return fmt.Errorf("envs: %s: at most %d bytes, no NUL", k, maxEnvLen)
		}
	}
	return nil
}

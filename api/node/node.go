// Package node is the contract between the containerd shim and the node
// agent, the two sandlot components on a node: where their files and
// sockets live (Layout), the shim's config file (Config), and through its
// subpackages the two APIs between them (controlapi: the agent drives a
// VM; stageapi: a shim asks the agent for restore data). Neither component
// imports the other; both import this.
package node

import "path/filepath"

// DefaultRoot is the shims' <root> when the config names none.
const DefaultRoot = "/run/sandlot"

// File names inside a Layout.
const (
	// ControlSocket is a pod's VM control API (controlapi), in its pod dir.
	ControlSocket = "control.sock"
	// StageSocket is the agent's stage API (stageapi), in the root.
	StageSocket = "agent.sock"
	// VMDir is the VM's run directory (QMP, disks, memory links) in a pod dir.
	VMDir   = "vm"
	podsDir = "pods"
)

// Layout is the on-node layout under one <root>: one directory per pod,
// <root>/pods/<podUID>/, holding its control socket and VM files. The root
// is a runtime option in containerd's config, so two nodes on one host do
// not collide.
type Layout struct{ Root string }

// PodDir is where one pod's control socket and VM files live.
func (l Layout) PodDir(podUID string) string { return filepath.Join(l.Root, podsDir, podUID) }

// PodsDir holds every pod directory.
func (l Layout) PodsDir() string { return filepath.Join(l.Root, podsDir) }

// ControlSocket is the control API socket of a pod's VM.
func (l Layout) ControlSocket(podUID string) string {
	return filepath.Join(l.PodDir(podUID), ControlSocket)
}

// VMDir is the run directory of a pod's VM.
func (l Layout) VMDir(podUID string) string { return filepath.Join(l.PodDir(podUID), VMDir) }

// StageSocket is where the agent serves the stage API by default.
func (l Layout) StageSocket() string { return filepath.Join(l.Root, StageSocket) }

// Package crienv starts an isolated, real containerd (v2.4.2, the one
// hack/containerd-bins.sh builds) with its CRI plugin: each node of the local
// cluster (internal/cluster) runs one, and the shim's tests run one alone. It
// gives its caller a CRI client plus helpers to import images built in Go,
// run pods and containers and exec into them. Every piece of state lives
// under one directory, nothing is written under /run, and the cleanup undoes
// what the host saw (bridge, netns and overlay mounts, cgroups, the CNI result
// cache, ip_forward).
//
// The host needs root, runc (/usr/sbin/runc), the CNI plugins in /usr/lib/cni,
// busybox-static (/bin/busybox) and iproute2.
package crienv

// Package podnet lets a microVM own a Kubernetes pod's IP, as Kata
// Containers' "tcfilter" mode does, and puts the sandbox's network
// boundary there: a tap is created in the pod's network namespace and one
// nftables table (netdev family) forwards frames between the pod interface
// (the CNI veth, usually eth0) and the tap, filtering both ways, so the
// guest — which takes the veth's MAC and IP — sits directly on the pod
// network with any CNI.
//
// The tap→pod direction opens separately (OpenGate) because a guest
// restored from a snapshot still carries the template's identity for a
// while; until then its chain drops everything, and after it only frames
// with the pod's MAC and IP leave (filter_table.go).
package podnet

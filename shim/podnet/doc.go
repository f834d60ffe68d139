// Package podnet lets a microVM own a Kubernetes pod's IP the way Kata
// Containers' "tcfilter" mode does: a tap is created in the pod's network
// namespace and tc mirred redirects every frame between the pod interface
// (the CNI veth, usually eth0) and the tap, so the guest — which takes the
// veth's MAC and IP — sits directly on the pod network.
//
// The tap→pod direction is installed separately (OpenGate) because a guest
// restored from a snapshot still carries the template's identity for a while;
// any frame it sends before re-identifying would move the template MAC in the
// bridge FDB to this pod's port. Without gact in the host kernel, "closed"
// means "no filter yet" rather than a drop rule.
//
// Only u32 (not matchall) and mirred are used, because the target kernel has
// CONFIG_NET_CLS_MATCHALL and CONFIG_NET_ACT_GACT unset.
package podnet

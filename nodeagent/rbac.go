package nodeagent

// The node agent's rights, generated into the Helm chart
// (charts/sandlot/files/agent/role.yaml) by `make manifests`: what
// package nodeagent's reconcilers read and write, each verb for a reason
// (below), none broader than the code uses. Its Snapshots,
// PausedSandboxes, Sandboxes and pods are its node's only (label and
// field selectors), but RBAC cannot say so; the chart's admission policy
// limits what its pod patches may touch to sandlot.dev/claim-activated.
//
//   - snapshots, pausedsandboxes: get/list/watch its node's data; update
//     to add and remove its finalizer (data.go). Status: patch only, the
//     phase, remote status and size (data.go).
//   - sandboxes: list/watch those whose status.nodeName is its node
//     (VMReady, rollbacks, builds), get past the cache, to tell whose data
//     a stage request is for (stageguard.go) or whose VM a snapshot is
//     taken of (data.go) when the cache does not hold it;
//     sandboxes/status: patch only, the VMReady, RolledBack and Built
//     conditions (server-side apply).
//   - templates: get, to check a stage request for a template's base
//     snapshot against the template (stageguard.go).
//   - pods: get/list/watch its node's sandbox pods (VM ready, claims,
//     stage checks); patch, the claim-activated annotation (agent.go).
//   - secrets: none. RBAC cannot narrow a read to a node, so a node's
//     root would read every sandbox's envd token: the controller seals
//     what the agent needs (a claim's token and env, a builder's token) to
//     the key this node's agent publishes on its Node (sealedidentity.go,
//     package api/sealed).
//   - configmaps: get, a COPY build step's uploaded files (build.go);
//     create and patch, a template builder's build log (buildlog.go,
//     server-side apply), in the builder's namespace.
//   - nodes: get and patch its own node's runtime and fingerprint labels
//     and its sealing key annotation (identity.go).
//   - events: create/patch, its Events on the data it serves.
//   - endpointslices: get/list/watch, those of sandlot-api's Service
//     only (the cache's selector): its pods may open connections to the
//     node's sandboxes (network.go). kube-proxy reads them all.
//   - daemonsets: get, so a terminating agent knows whether it is going
//     away (install.Leaving) before it takes the runtime off its node.
//
// +kubebuilder:rbac:groups=sandlot.dev,resources=snapshots;pausedsandboxes,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=sandlot.dev,resources=snapshots/status;pausedsandboxes/status,verbs=patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=sandboxes,verbs=get;list;watch
// +kubebuilder:rbac:groups=sandlot.dev,resources=sandboxes/status,verbs=patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=templates,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch

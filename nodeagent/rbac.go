package nodeagent

// The node agent's rights, generated into the Helm chart
// (charts/sandlot/files/agent/role.yaml) by `make manifests`: what
// package nodeagent's reconcilers read and write. Its Snapshots,
// PausedSandboxes and pods are its node's only (label and field
// selectors), but RBAC cannot say so. The DaemonSet: a terminating
// agent asks whether it is going away (install.Leaving) before it takes
// the runtime off its node. Templates: a stage request for a template's
// base snapshot is checked against the template (stageguard.go).
//
// +kubebuilder:rbac:groups=sandlot.dev,resources=snapshots;pausedsandboxes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=snapshots/status;pausedsandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=sandboxes,verbs=get;list;watch
// +kubebuilder:rbac:groups=sandlot.dev,resources=sandboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandlot.dev,resources=templates,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get

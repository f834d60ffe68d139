package install

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Leaving tells whether the agent's DaemonSet is going away, the only
// time a terminating agent pod should take the runtime off its node: a
// pod replaced by a rolling update, or deleted to restart, finds its
// DaemonSet in place and leaves the node as it is (no containerd
// restart, no window without the runtime). Not allowed to look counts as
// gone: `helm uninstall` deletes the agent's RBAC and ServiceAccount with
// the DaemonSet, usually before its pods end.
func Leaving(ctx context.Context, c client.Reader, key client.ObjectKey) (bool, error) {
	ds := &appsv1.DaemonSet{}
	err := c.Get(ctx, key, ds)
	switch {
	case err == nil:
		return ds.DeletionTimestamp != nil, nil
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return true, nil
	}
	return false, fmt.Errorf("daemonset %s: %w", key, err)
}

// ExpandEnv expands Kubernetes' $(VAR) references in s from lookup, as
// the kubelet does in a container's args but not in a lifecycle hook's
// command: the chart's preStop passes the same paths as the init
// container, $(NODE_NAME) included. $$ is a literal $; an unknown
// variable stays as written.
func ExpandEnv(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i:], ')'); end > 2 {
				name := s[i+2 : i+end]
				if v, ok := lookup(name); ok {
					b.WriteString(v)
					i += end
					continue
				}
			}
		}
		b.WriteByte('$')
	}
	return b.String()
}

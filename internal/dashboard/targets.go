package dashboard

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// MetricsLabel marks the chart's metrics Services (its ServiceMonitor
// selects them by it).
const MetricsLabel = "sandlot.dev/metrics"

// Jobs are the chart's metrics Services in ns, one job each, their ready
// endpoints on the port named metrics as targets.
func Jobs(ctx context.Context, cs kubernetes.Interface, ns string) ([]Job, error) {
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: MetricsLabel + "=true"})
	if err != nil {
		return nil, fmt.Errorf("list metrics Services in %s: %w", ns, err)
	}
	var jobs []Job
	for _, svc := range svcs.Items {
		slices, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx,
			metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
		if err != nil {
			return nil, fmt.Errorf("endpoints of %s: %w", svc.Name, err)
		}
		j := Job{Name: strings.TrimPrefix(svc.Name, "sandlot-"), Targets: readyTargets(slices.Items)}
		if len(j.Targets) == 0 {
			return nil, fmt.Errorf("service %s/%s has no ready endpoint on its metrics port", ns, svc.Name)
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("no Service labelled %s=true in %s: is sandlot installed there (make up)?", MetricsLabel, ns)
	}
	return jobs, nil
}

// readyTargets are the ready endpoints' host:port on the port named
// metrics, sorted.
func readyTargets(slices []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, sl := range slices {
		port := int32(0)
		for _, p := range sl.Ports {
			if p.Name != nil && *p.Name == "metrics" && p.Port != nil {
				port = *p.Port
			}
		}
		for _, ep := range sl.Endpoints {
			if port == 0 || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	sort.Strings(out)
	return out
}

// ScraperToken makes (or keeps) service account ns/name bound to the
// chart's ClusterRole sandlot-metrics-reader, as a Prometheus is, and
// returns a token of it valid for two hours.
func ScraperToken(ctx context.Context, cs kubernetes.Interface, ns, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("service account %s/%s: %w", ns, name, err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sandlot-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("bind %s to sandlot-metrics-reader: %w", name, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(2 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

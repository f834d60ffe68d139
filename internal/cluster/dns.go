package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sandlot-dev/sandlot/internal/crienv"
)

// The cluster DNS (Options.ClusterDNS): CoreDNS, built by
// hack/coredns-bins.sh, runs on the API bridge beside the control plane
// and serves the kube-dns Service, whose address the kubelets give pods.
const (
	CoreDNSVersion = "v1.15.0"
	DNSServiceIP   = "10.0.0.10"
	ClusterDomain  = "cluster.local"
	dnsReadyPort   = 8181
	dnsHealthPort  = 8054
)

// clusterDNS starts CoreDNS (cluster names from the API server, the rest
// forwarded to the upstream the pods would otherwise use) and the
// kube-dns Service in front of it.
func (c *Cluster) clusterDNS(t crienv.T) error {
	if !c.ClusterDNS {
		return nil
	}
	bin := filepath.Join(cacheDir(), "coredns", CoreDNSVersion, "coredns")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w: build CoreDNS first: make coredns-bins (hack/coredns-bins.sh)", err)
	}
	upstream := "/etc/resolv.conf"
	if len(c.DNS) > 0 {
		upstream = strings.Join(c.DNS, " ")
	}
	corefile := fmt.Sprintf(`.:53 {
    bind %[1]s
    ready %[1]s:%[2]d
    health %[1]s:%[3]d
    errors
    kubernetes %[4]s in-addr.arpa ip6.arpa {
        kubeconfig %[5]s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . %[6]s
    cache 30
    loadbalance
}
`, c.apiIP, dnsReadyPort, dnsHealthPort, ClusterDomain, c.Kubeconfig, upstream)
	path := filepath.Join(c.Dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return err
	}
	p, err := c.start(t, "coredns", bin, []string{"-conf", path})
	if err != nil {
		return err
	}
	if err := p.waitFor(60*time.Second, "ready", func() error {
		return httpOK(fmt.Sprintf("http://%s:%d/ready", c.apiIP, dnsReadyPort))
	}); err != nil {
		return err
	}
	return c.dnsService()
}

// dnsService is kube-dns: a Service without a selector whose one endpoint
// is CoreDNS on the API bridge (as the kubernetes Service's is the API
// server), so pods reach it through kube-proxy at DNSServiceIP.
func (c *Cluster) dnsService() error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	meta := metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}}
	svc := &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{ClusterIP: DNSServiceIP, Ports: []corev1.ServicePort{
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP}}}}
	if _, err := cs.CoreV1().Services(meta.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube-dns Service: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kube-dns-coredns", Namespace: meta.Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{c.apiIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)},
			{Name: ptr.To("dns-tcp"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(meta.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube-dns EndpointSlice: %w", err)
	}
	return nil
}

package nodeagent_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// networksOf is what the pod's shim was told, in order.
func networksOf(vm *fakeVM) []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return slices.Clone(vm.networks)
}

// waitApplied waits until the shim got want and the pod records it.
func (a *agent) waitApplied(pod *corev1.Pod, vm *fakeVM, want string) {
	a.t.Helper()
	a.eventually("network "+want+" applied to "+pod.Name, func() error {
		if err := a.get(pod); err != nil {
			return err
		}
		got := networksOf(vm)
		if len(got) == 0 || got[len(got)-1] != want {
			return fmt.Errorf("shim told %q, want %q last", got, want)
		}
		if applied := pod.Annotations[sandlotv1.AnnotationNetworkApplied]; applied != want {
			return fmt.Errorf("network-applied %q, want %q", applied, want)
		}
		return nil
	})
}

// TestNetworkRulesFollowThePod: the agent tells a running VM's shim the
// rules the pod's annotation holds, records them as applied, and applies
// an edit live; a claimed pool VM gets its sandbox's rules with the claim.
func TestNetworkRulesFollowThePod(t *testing.T) {
	a := startAgent(t, nil)
	a.sandbox("netted", "nettedsandbox0000001")
	first, err := sandlotv1.EncodeNetwork(&sandlotv1.SandboxNetwork{AllowOut: []string{"example.com"}, AllowInternetAccess: ptr.To(false)})
	if err != nil {
		t.Fatal(err)
	}
	pod, vm := a.pod("netted", map[string]string{sandlotv1.LabelSandbox: "netted"},
		map[string]string{sandlotv1.AnnotationNetwork: first}, corev1.PodRunning, "Running")
	a.waitApplied(pod, vm, first)

	second, err := sandlotv1.EncodeNetwork(&sandlotv1.SandboxNetwork{DenyOut: []string{"8.8.8.8"}})
	if err != nil {
		t.Fatal(err)
	}
	orig := pod.DeepCopy()
	pod.Annotations[sandlotv1.AnnotationNetwork] = second
	if err := a.c.Patch(context.Background(), pod, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	a.waitApplied(pod, vm, second)
	a.waitVMReady("netted", metav1.ConditionTrue, "VMRunning")

	// sandlot-api's pods and the agent's own pod (a build reaches its
	// builder from it) may connect: each change of the endpoints is pushed
	// to the shim.
	a.create(&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "sandlot-api-x",
		Labels: map[string]string{discoveryv1.LabelServiceName: "sandlot-api"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.99.0.7"}}, {Addresses: []string{"10.99.0.3"}}}})
	a.eventually("sandlot-api's addresses pushed", func() error {
		vm.mu.Lock()
		defer vm.mu.Unlock()
		if want := []string{"10.99.0.3", agentPodIP, "10.99.0.7"}; !slices.Equal(vm.ingress, want) {
			return fmt.Errorf("ingress_from %v, want %v", vm.ingress, want)
		}
		return nil
	})
}

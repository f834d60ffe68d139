package sandbox

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
)

// buildPod renders the Pod whose VM is the sandbox. The shim reads the
// annotations; the env carries the sandbox identity, the token by
// reference to the Sandbox's Secret.
func buildPod(sbx *sandlotv1.Sandbox, plan podspec.Plan) (*corev1.Pod, error) {
	pod, err := podspec.Render(sbx.Namespace, plan, podspec.Env(sbx.Name, plan))
	if err != nil {
		return nil, err
	}
	pod.Name = plan.Name
	pod.Labels = map[string]string{
		sandlotv1.LabelSandbox:   sbx.Name,
		sandlotv1.LabelSandboxID: plan.SandboxID,
		sandlotv1.LabelNode:      plan.Node,
	}
	pod.OwnerReferences = []metav1.OwnerReference{ownerRef(sbx)}
	return pod, nil
}

func ownerRef(sbx *sandlotv1.Sandbox) metav1.OwnerReference {
	return *metav1.NewControllerRef(sbx, sandlotv1.GroupVersion.WithKind("Sandbox"))
}

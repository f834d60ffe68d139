package podspec

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/placement"
)

// Plan is everything a sandbox Pod is built from.
type Plan struct {
	Name      string
	Node      string
	SandboxID string
	VM        sandlotv1.VMSpec
	Env       []sandlotv1.EnvVar
	// Restore is the data the VM restores (Kind "": a cold boot).
	Restore sandlotv1.RestoreRef
	// Probe, for a template's builder, gates the pod's readiness.
	Probe *sandlotv1.ReadinessProbe
	// MilliCPUPerVCPU is the CPU request per vCPU (1000 = a core each).
	MilliCPUPerVCPU int64
	// Pool is the Template of a warm pool pod; Slot makes it a start slot
	// (no VM until a claim).
	Pool string
	Slot bool
	// Constraints are the template's tolerations and node selector: the
	// placement honoured them, the kubelet's admission checks them again.
	Constraints placement.Constraints
	// Network is the sandbox's spec.network (AnnotationNetwork).
	Network *sandlotv1.SandboxNetwork
	// Volumes are the Volumes the shim serves (AnnotationVolumes), from
	// VM.VolumeMounts.
	Volumes []sandlotv1.PodVolume
	// PullPolicy is the operator's (default IfNotPresent); PullSecrets
	// the template's.
	PullPolicy  corev1.PullPolicy
	PullSecrets []corev1.LocalObjectReference
}

// Render is a sandlot pod without its name, labels and owner.
func Render(ns string, plan Plan, env []corev1.EnvVar) (*corev1.Pod, error) {
	// Requests pack VMs (MilliCPUPerVCPU may overcommit) and weigh them
	// under contention; memory is also the limit QEMU runs under (the
	// pod's cgroup). No CPU limit: the VM's vCPUs already bound what the
	// guest can use, and a CFS quota would throttle the VMM's own threads
	// (I/O, device state) beside them.
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(plan.VM.Resources.VCPU)*plan.MilliCPUPerVCPU, resource.DecimalSI),
		corev1.ResourceMemory: quantityMiB(plan.VM.Resources.MemoryMiB),
	}
	limits := corev1.ResourceList{corev1.ResourceMemory: quantityMiB(plan.VM.Resources.MemoryMiB)}
	ann, err := VMAnnotations(plan).Encode()
	if err != nil {
		return nil, fmt.Errorf("pod annotations: %w", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Annotations: ann},
		Spec: corev1.PodSpec{
			NodeName:                      plan.Node,
			RuntimeClassName:              ptr.To(sandlotv1.RuntimeClassName),
			RestartPolicy:                 corev1.RestartPolicyNever,
			Hostname:                      plan.SandboxID,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](10),
			Tolerations:                   slices.Clone(plan.Constraints.Tolerations),
			ImagePullSecrets:              slices.Clone(plan.PullSecrets),
			NodeSelector:                  maps.Clone(plan.Constraints.NodeSelector),
			Containers: []corev1.Container{{
				Name:            sandlotv1.ContainerName,
				Image:           plan.VM.Image,
				ImagePullPolicy: cmp.Or(plan.PullPolicy, corev1.PullIfNotPresent),
				Env:             env,
				Resources:       corev1.ResourceRequirements{Requests: res, Limits: limits},
				Ports: []corev1.ContainerPort{
					{Name: "envd", ContainerPort: sandlotv1.EnvdPort, Protocol: corev1.ProtocolTCP},
					{Name: "code", ContainerPort: sandlotv1.CodeInterpreterPort, Protocol: corev1.ProtocolTCP},
				},
			}},
		},
	}
	pod.Spec.Containers[0].ReadinessProbe = readinessProbe(plan.Probe)
	mountEgressSecret(pod, plan.Network)
	return pod, nil
}

// mountEgressSecret has the kubelet fetch the Secret the network rules'
// placeholders name (with the node's own, pod-bound access) and keep it
// current in the sandbox container's mounts, where the shim reads it;
// the guest never sees it. Optional: a Secret made after the pod still
// arrives, and a missing key is the shim's error, in the status.
func mountEgressSecret(pod *corev1.Pod, n *sandlotv1.SandboxNetwork) {
	if n == nil || n.SecretName == "" {
		return
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: egressSecretVolume,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: n.SecretName,
			Optional: ptr.To(true), DefaultMode: ptr.To[int32](0o400)}}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: egressSecretVolume,
		MountPath: sandlotv1.EgressSecretsPath, ReadOnly: true})
}

const egressSecretVolume = "egress-secrets"

// readinessProbe is the kubelet's probe of the VM on the pod IP.
func readinessProbe(p *sandlotv1.ReadinessProbe) *corev1.Probe {
	if p == nil {
		return nil
	}
	probe := &corev1.Probe{PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 3, SuccessThreshold: 1}
	switch {
	case p.HTTPGet != nil:
		probe.HTTPGet = &corev1.HTTPGetAction{Path: p.HTTPGet.Path, Port: intstr.FromInt32(p.HTTPGet.Port)}
	case p.TCPSocket != nil:
		probe.TCPSocket = &corev1.TCPSocketAction{Port: intstr.FromInt32(p.TCPSocket.Port)}
	}
	return probe
}

// VMAnnotations is what the pod's annotations tell its shim.
func VMAnnotations(plan Plan) sandlotv1.VMAnnotations {
	a := sandlotv1.VMAnnotations{SandboxID: plan.SandboxID, VCPU: plan.VM.Resources.VCPU,
		MemoryMiB: plan.VM.Resources.MemoryMiB, WritableLayerMiB: plan.VM.WritableLayerMiB, Pool: plan.Pool,
		Slot: plan.Slot, Network: plan.Network, Volumes: plan.Volumes}
	if plan.Restore.Kind != "" {
		r := plan.Restore
		a.Restore = &r
	}
	return a
}

func Env(sandbox string, plan Plan) []corev1.EnvVar {
	env := make([]corev1.EnvVar, 0, len(plan.Env)+2)
	for _, e := range plan.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	return append(env,
		corev1.EnvVar{Name: sandlotv1.EnvSandboxID, Value: plan.SandboxID},
		corev1.EnvVar{Name: sandlotv1.EnvAccessToken, ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: sandlotv1.TokenSecretName(sandbox)},
				Key:                  sandlotv1.TokenSecretKey,
			},
		}},
	)
}

// quantityMiB renders MiB as a resource quantity.
func quantityMiB(mib int32) resource.Quantity {
	return *resource.NewQuantity(int64(mib)<<20, resource.BinarySI)
}

package sandbox

import (
	"context"
	"encoding/base64"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandlot-dev/sandlot/api/sealed"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/podspec"
)

// The node agent reads no Secret (RBAC cannot narrow a read to a node,
// so any node's root would read every sandbox's token): what an agent
// needs of a sandbox — its envd token for a claim or a build, its env
// for a claim — is sealed to the public key that node's agent publishes
// on its Node (package api/sealed), for one pod and sandbox.

// sandboxIdentity is sbx's envd token (from the Secret ensureToken made
// earlier in this reconcile, read past the cache when the cache does not
// hold it yet) and its env.
func (r *Reconciler) sandboxIdentity(ctx context.Context, sbx *sandlotv1.Sandbox) (sealed.Identity, error) {
	key := client.ObjectKey{Namespace: sbx.Namespace, Name: sandlotv1.TokenSecretName(sbx.Name)}
	secret := &corev1.Secret{}
	err := r.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, secret)
	}
	if err != nil {
		return sealed.Identity{}, fmt.Errorf("token of sandbox %s: %w", sbx.Name, err)
	}
	token := string(secret.Data[sandlotv1.TokenSecretKey])
	if token == "" {
		return sealed.Identity{}, fmt.Errorf("secret %s holds no %s", key, sandlotv1.TokenSecretKey)
	}
	var env map[string]string
	if len(sbx.Spec.Env) > 0 {
		env = envMap(sbx.Spec.Env)
	}
	return sealed.Identity{Token: token, Env: env}, nil
}

// hasSealingKey: node's agent published the key claims are sealed to.
func hasSealingKey(n *corev1.Node) bool { return n.Annotations[sandlotv1.AnnotationClaimKey] != "" }

// sealFor seals id for pod (in namespace, on node n) and sandbox.
func sealFor(n *corev1.Node, namespace, pod, sandbox string, id sealed.Identity) ([]byte, error) {
	if !hasSealingKey(n) {
		return nil, fmt.Errorf("node %s publishes no sealing key (annotation %s): its sandlot-agent does not run, or predates sealed claims",
			n.Name, sandlotv1.AnnotationClaimKey)
	}
	box, err := sealed.SealIdentity(n.Annotations[sandlotv1.AnnotationClaimKey], sealed.Context(namespace, pod, sandbox), id)
	if err != nil {
		return nil, fmt.Errorf("seal the token of %s for node %s: %w", sandbox, n.Name, err)
	}
	return box, nil
}

// sealBuilderToken puts a template builder's envd token, sealed to its
// node, on its pod: the node's agent runs the build's steps through envd
// with it. Other pods carry none (their token reaches the VM through the
// pod's env, which only the kubelet of their node reads).
func (r *Reconciler) sealBuilderToken(ctx context.Context, sbx *sandlotv1.Sandbox, pod *corev1.Pod) error {
	if sbx.Annotations[sandlotv1.AnnotationBaseOf] == "" {
		return nil
	}
	n := &corev1.Node{}
	if err := r.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, n); err != nil {
		return fmt.Errorf("node %s of builder %s: %w", pod.Spec.NodeName, sbx.Name, err)
	}
	id, err := r.sandboxIdentity(ctx, sbx)
	if err != nil {
		return err
	}
	box, err := sealFor(n, pod.Namespace, pod.Name, sbx.Name, sealed.Identity{Token: id.Token})
	if err != nil {
		return err
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[sandlotv1.AnnotationSealedIdentity] = base64.StdEncoding.EncodeToString(box)
	return nil
}

// createPod renders sbx's pod to plan (a builder's with its sealed token)
// and creates it.
func (r *Reconciler) createPod(ctx context.Context, sbx *sandlotv1.Sandbox, plan podspec.Plan) (*corev1.Pod, error) {
	pod, err := buildPod(sbx, plan)
	if err == nil {
		err = r.sealBuilderToken(ctx, sbx, pod)
	}
	if err == nil {
		err = r.Create(ctx, pod)
	}
	return pod, err
}

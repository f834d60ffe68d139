package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/vm"
)

// Fingerprint is what a snapshot taken on this node records, so the
// controller restores it only on nodes that print the same: CPU model and
// flags, QEMU version, accelerator. (The guest kernel is the same asset
// on every node of a release; snapshots record none.) hostRoot is where
// the node's / is mounted when the agent runs in a container ("" when it
// runs on the node): QEMU is the node's.
func Fingerprint(hostRoot, qemu string) (sandlotv1.Fingerprint, error) {
	qv, err := vm.QEMUVersionIn(hostRoot, qemu)
	if err != nil {
		return sandlotv1.Fingerprint{}, err
	}
	accel, err := vm.DetectAccel()
	if err != nil {
		return sandlotv1.Fingerprint{}, err
	}
	return sandlotv1.Fingerprint{CPU: vm.CPUFingerprint(), QEMU: qv, Accel: accel}, nil
}

// PublishFingerprint labels the agent's node with its fingerprint key
// and annotates it with the public key the controller seals each
// sandbox's token and env to for this node (claimKey, base64) and the
// guest its shims boot (GuestDigest; "" removes it: unknown).
func PublishFingerprint(ctx context.Context, c client.Client, node string, fp sandlotv1.Fingerprint, claimKey, guest string) error {
	annotations := map[string]any{sandlotv1.AnnotationClaimKey: claimKey, sandlotv1.AnnotationGuest: nil}
	if guest != "" {
		annotations[sandlotv1.AnnotationGuest] = guest
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{sandlotv1.LabelFingerprint: fp.Key()},
		"annotations": annotations}})
	if err != nil {
		return err
	}
	n := &corev1.Node{}
	n.Name = node
	if err := c.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("label node %s with its fingerprint: %w", node, err)
	}
	return nil
}

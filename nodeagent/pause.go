package nodeagent

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// A PausedSandbox's VM stops before its state is saved and stays stopped:
// nothing the guest does after the package is taken could be resumed, so
// the controller may call the sandbox Paused as soon as the package is
// Ready and delete the pod afterwards. A pause that fails, or a package
// deleted while its sandbox's pod still runs (unpaused before the pod
// went), lets the VM run on again.

// haltsVM says whether taking snap's data leaves the VM stopped.
func haltsVM(snap dataObject) bool { return snap.Kind() == "PausedSandbox" }

// halt stops the VM for a pause package, before the snapshot (the
// snapshot of a stopped VM keeps it stopped).
func halt(ctx context.Context, c Control, snap dataObject) error {
	if !haltsVM(snap) {
		return nil
	}
	if _, err := c.Pause(ctx, &controlapi.PauseRequest{}); err != nil {
		return fmt.Errorf("stop the VM for its pause package: %w", err)
	}
	return nil
}

// resumeHalted lets a VM halt stopped run on, best effort: the pod may be
// gone already, or the VM running (a pause cancelled before it began).
func (r *DataReconciler) resumeHalted(ctx context.Context, snap dataObject) {
	if !haltsVM(snap) {
		return
	}
	pod, err := r.sandboxPod(ctx, snap)
	// Not a pod resumed from this package (its VM is not the halted one).
	if err != nil || pod.DeletionTimestamp != nil || sandlotv1.PodRestoresFrom(pod.Annotations, string(snap.GetUID())) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := r.dial(ctx, string(pod.UID))
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := c.Resume(ctx, &controlapi.ResumeRequest{}); err == nil {
		log.FromContext(ctx).Info("the VM runs on: its pause did not complete", "object", snap.GetName())
	}
}

// nodeOf is the node whose agent owns the data: the status says, or for
// a new PausedSandbox its spec (see startFromSpec).
func nodeOf(snap dataObject) string {
	if p, ok := snap.(pausedObject); ok && fresh(p) {
		return p.Spec.NodeName
	}
	return snap.Data().NodeName
}

func fresh(p pausedObject) bool {
	return p.Status.NodeName == "" && p.Status.Phase == "" && p.DeletionTimestamp == nil
}

// startFromSpec: a new PausedSandbox names its node in its spec (and is
// labelled for it when created), so the agent takes it at once rather than
// after the controller copies the node into its status: a pause waits on
// this. The controller's later status write keeps what the agent wrote.
func startFromSpec(snap dataObject) {
	p, ok := snap.(pausedObject)
	if !ok || !fresh(p) {
		return
	}
	p.Status.NodeName, p.Status.Phase = p.Spec.NodeName, sandlotv1.DataPending
}

package writes

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// PatchStatus writes obj's status as one merge patch against orig, when it
// changed. The patch carries the resourceVersion: a merge patch replaces
// whole lists, so a stale copy must not overwrite conditions another
// manager (the node agent) owns. A conflict is not an error: the newer
// version's watch event reconciles again. Once written, each condition
// transition is an Event (rec may be nil).
func PatchStatus(ctx context.Context, c client.Client, rec events.EventRecorder, orig, obj client.Object) error {
	if equality.Semantic.DeepEqual(orig, obj) {
		return nil
	}
	err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err):
		log.FromContext(ctx).V(1).Info("status patch conflict; waiting for the newer version")
		return nil
	case err != nil:
		return fmt.Errorf("patch status of %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	recordTransitions(rec, orig, obj)
	return nil
}

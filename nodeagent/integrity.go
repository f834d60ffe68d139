package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
	"github.com/sandlot-dev/sandlot/api/snapshot"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/nodeagent/store"
	"github.com/sandlot-dev/sandlot/vm"
)

// Data is refused for a restore when it is not what a node of the
// cluster wrote (store.ErrIntegrity: the store checked its signatures and
// checksums) or when its manifest names a file no restore may open
// (vm.ConfineError). The restore fails with the reason (the stage API's
// HTTP 422, stageapi.Reason*); the data's object gets a Warning Event
// with it, since the data is bad, not the pod; nothing is deleted.

// actionStage is the action of the Events about data staged for a restore.
const actionStage = "StageData"

// refusal is the reason err refuses its data, "" when it does not.
func refusal(err error) string {
	var ce *vm.ConfineError
	switch {
	case errors.Is(err, store.ErrIntegrity):
		return stageapi.ReasonIntegrityCheckFailed
	case errors.As(err, &ce):
		return stageapi.ReasonManifestRejected
	}
	return ""
}

// confine checks the manifest in key's directory names only files in
// the store. On a shared store the base disk is in the store too
// (makePortable); a local store's data never left this node, and the
// shim's vm.Restore confines it (the store and the image cache, which
// this agent does not mount).
func (l *layout) confine(key, dir string) error {
	if !l.shared {
		return nil
	}
	m, err := snapshot.ReadManifest(dir)
	if err != nil {
		return err
	}
	root, err := storeRoot(dir, key)
	if err != nil {
		return err
	}
	return vm.Confine(m, dir, vm.Roots{Store: root})
}

// refusalReporter records a refusal on the data's object.
type refusalReporter struct {
	api  client.Reader
	rec  events.EventRecorder
	node string
}

// report records err's refusal as a Warning Event on the kind/uid
// object, in the background: the restore does not wait for it.
func (r *refusalReporter) report(ctx context.Context, kind, uid, reason string, err error) {
	if r == nil || r.rec == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	go func() {
		defer cancel()
		obj, ferr := r.find(ctx, kind, uid)
		if ferr != nil || obj == nil {
			log.FromContext(ctx).Info("no object to record a refusal on", "kind", kind, "uid", uid, "error", ferr)
			return
		}
		event(r.rec, obj, nil, true, reason, actionStage,
			fmt.Sprintf("node %s refused this data for a restore: %v", r.node, err))
	}()
}

// find is the kind object of UID uid (another node's, likely: the cache
// holds this node's only), nil if none. Only refusals look for it, so the
// list (of metadata) is no cost of a restore.
func (r *refusalReporter) find(ctx context.Context, kind, uid string) (client.Object, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(sandlotv1.GroupVersion.WithKind(kind + "List"))
	if err := r.api.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list %s: %w", kind, err)
	}
	for i := range list.Items {
		if o := &list.Items[i]; string(o.UID) == uid {
			o.SetGroupVersionKind(sandlotv1.GroupVersion.WithKind(kind)) // the Event's reference
			return o, nil
		}
	}
	return nil, nil
}

// refuse answers a stage request whose data is refused: HTTP 422 with
// the reason, which the shim's restore fails with.
func (s *StageServer) refuse(ctx context.Context, w http.ResponseWriter, req stageapi.StageRequest, key string, err error) {
	reason := refusal(err)
	log.FromContext(ctx).Error(err, "refused data for a restore", "key", key, "reason", reason)
	s.refusals.report(ctx, req.Kind, req.UID, reason, err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnprocessableEntity)
	_ = json.NewEncoder(w).Encode(stageapi.Error{Reason: reason, Message: err.Error()})
}

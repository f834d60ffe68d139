package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"regexp"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// createSnapshot snapshots a running sandbox and returns once the
// snapshot can be restored on its node: its name is a templateID.
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body snapshotBody
	if err := decodeBody(r, &body); err != nil {
		return 0, nil, err
	}
	if body.Name != "" && !dnsLabel.MatchString(body.Name) {
		return 0, nil, errorf(http.StatusBadRequest, "field \"name\": %q must be a DNS label (at most 63 lowercase letters, digits and '-')", body.Name)
	}
	sbx, err := s.runningSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if err := s.allowOperation(w, r, "snapshot"); err != nil {
		return 0, nil, err
	}
	snap, err := s.snapshot(r.Context(), sbx, body.Name, "snap-")
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, &snapshotInfo{SnapshotID: snap.Name, Names: []string{snap.Name}}, nil
}

// runningSandbox is a sandbox that can be snapshotted: 409 when paused.
func (s *Server) runningSandbox(ctx context.Context, id string) (*sandlotv1.Sandbox, *apiError) {
	sbx, err := s.sandbox(ctx, id, false)
	if err != nil {
		return nil, err
	}
	if paused(sbx) {
		return nil, errorf(http.StatusConflict, "sandbox %q is paused: connect to it first", id)
	}
	return sbx, nil
}

// snapshot makes a Snapshot of sbx (named name, or generated with
// prefix) and waits until its data is Ready.
func (s *Server) snapshot(ctx context.Context, sbx *sandlotv1.Sandbox, name, prefix string) (*sandlotv1.Snapshot, *apiError) {
	snap := &sandlotv1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sbx.Namespace},
		Spec: sandlotv1.SnapshotSpec{Source: sandlotv1.SnapshotSource{Sandbox: sbx.Name}}}
	if name == "" {
		snap.GenerateName = prefix
	}
	if err := s.kube.Create(ctx, snap); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, errorf(http.StatusConflict, "a snapshot named %q exists", name)
		}
		return nil, kubeError("create the snapshot", err)
	}
	err := s.kube.waitFor(ctx, s.cfg.SnapshotTimeout, "snapshot "+snap.Name, func() (bool, *apiError) {
		if err := s.kube.Get(ctx, client.ObjectKeyFromObject(snap), snap); err != nil {
			return false, nil
		}
		switch snap.Status.Phase {
		case sandlotv1.DataFailed:
			msg := "the snapshot failed"
			if c := meta.FindStatusCondition(snap.Status.Conditions, sandlotv1.ConditionReady); c != nil {
				msg = c.Reason + ": " + c.Message
			}
			return false, errorf(http.StatusInternalServerError, "snapshot %s: %s", snap.Name, msg)
		case sandlotv1.DataReady:
			return true, nil
		}
		return false, nil
	})
	return snap, err
}

// listSnapshots lists users' snapshots (not template bases), optionally
// of one sandbox, in pages.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	q := r.URL.Query()
	limit, err := pageLimit(q.Get("limit"))
	if err != nil {
		return 0, nil, err
	}
	list := &sandlotv1.SnapshotList{}
	if err := s.kube.List(r.Context(), list, client.InNamespace(teamOf(r.Context()))); err != nil {
		return 0, nil, kubeError("list snapshots", err)
	}
	var items []sandlotv1.Snapshot
	for _, snap := range list.Items {
		if snap.DeletionTimestamp != nil || ownedByTemplate(&snap) ||
			(q.Get("sandboxID") != "" && snap.Status.SandboxID != q.Get("sandboxID")) ||
			(q.Get("name") != "" && snap.Name != q.Get("name")) {
			continue
		}
		items = append(items, snap)
	}
	page, next, err := paginate(items, q.Get("nextToken"), limit, func(snap *sandlotv1.Snapshot) pageKey {
		return pageKey{snap.CreationTimestamp.Time, snap.Name}
	})
	if err != nil {
		return 0, nil, err
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out := make([]snapshotInfo, 0, len(page))
	for _, snap := range page {
		out = append(out, snapshotInfo{SnapshotID: snap.Name, Names: []string{snap.Name}})
	}
	return http.StatusOK, out, nil
}

func ownedByTemplate(o metav1.Object) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == "Template" {
			return true
		}
	}
	return false
}

// fork snapshots a running sandbox and starts count sandboxes from that
// snapshot: one result per fork, a sandbox or an error. The snapshot
// stays (listed under /snapshots) for more forks. Each fork is a create,
// charged to the key's create rate before the snapshot is taken.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		return 0, nil, err
	}
	count := int64(1)
	if body.Count != nil {
		count = *body.Count
	}
	if count < 1 || count > maxForkCount {
		return 0, nil, errorf(http.StatusBadRequest, "field \"count\": %d is outside 1..%d", count, maxForkCount)
	}
	if body.Timeout != nil {
		if _, err := seconds("timeout", body.Timeout, 0); err != nil {
			return 0, nil, err
		}
	}
	parent, err := s.runningSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if err := s.allowCreate(w, r, int(count)); err != nil {
		return 0, nil, err
	}
	snap, err := s.snapshot(r.Context(), parent, "", "fork-")
	if err != nil {
		return 0, nil, err
	}
	results := make([]forkResult, count)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			sbx, err := s.startSandbox(r.Context(), s.forkOf(parent, snap.Name, body.Timeout))
			if err != nil {
				results[i].Error = err
				return
			}
			results[i].Sandbox = s.sandboxJSON(r.Context(), sbx)
		})
	}
	wg.Wait()
	return http.StatusCreated, results, nil
}

// forkOf is a fork of parent from its snapshot: the parent's metadata
// and network rules (egress rules and private traffic) are the child's.
func (s *Server) forkOf(parent *sandlotv1.Sandbox, snapshot string, timeout *int64) *sandlotv1.Sandbox {
	req := newSandbox{TemplateID: snapshot, Timeout: timeout, Metadata: parent.Spec.Metadata}
	sbx, _ := s.newSandboxObject(parent.Namespace, &req, sandlotv1.SandboxSource{Snapshot: snapshot}) // no network asked: nothing to refuse
	sbx.Spec.Network = parent.Spec.Network.DeepCopy()
	if privateTraffic(parent) {
		sbx.Annotations[AnnotationPrivateTraffic] = "true"
	}
	return sbx
}

// rollback restores a sandbox in place from one of its own snapshots
// (as CubeSandbox offers): same ID, same node. 409 when the agent
// refuses (another sandbox's snapshot, ...).
func (s *Server) rollback(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body rollbackBody
	if err := decodeBody(r, &body); err != nil {
		return 0, nil, err
	}
	if !dnsLabel.MatchString(body.SnapshotID) {
		return 0, nil, errorf(http.StatusBadRequest, "field \"snapshotID\": %q is not a snapshot ID", body.SnapshotID)
	}
	sbx, err := s.runningSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if err := s.kube.Get(r.Context(), client.ObjectKey{Namespace: teamOf(r.Context()), Name: body.SnapshotID}, &sandlotv1.Snapshot{}); err != nil {
		return 0, nil, errorf(http.StatusNotFound, "snapshot %q not found", body.SnapshotID)
	}
	requestID := randomID()
	if err := s.patchSpec(r.Context(), sbx, map[string]any{"rollback": map[string]any{"snapshot": body.SnapshotID, "requestID": requestID}}); err != nil {
		return 0, nil, err
	}
	gen := sbx.Generation
	err = s.kube.waitFor(r.Context(), s.cfg.CreateTimeout, "rollback of "+r.PathValue("id"), func() (bool, *apiError) {
		if err := s.kube.Get(r.Context(), client.ObjectKeyFromObject(sbx), sbx); err != nil {
			return false, errorf(http.StatusNotFound, "sandbox %q was deleted during the rollback", r.PathValue("id"))
		}
		if sbx.Status.LastRollbackRequestID == requestID {
			return true, nil
		}
		c := meta.FindStatusCondition(sbx.Status.Conditions, sandlotv1.ConditionRolledBack)
		if c == nil || c.ObservedGeneration < gen {
			return false, nil
		}
		switch c.Reason {
		case sandlotv1.ReasonRollbackRefused:
			return false, errorf(http.StatusConflict, "rollback refused: %s", c.Message)
		case sandlotv1.ReasonRollbackFailed:
			return false, errorf(http.StatusInternalServerError, "rollback failed: %s", c.Message)
		}
		return false, nil
	})
	if err != nil {
		return 0, nil, err
	}
	// Answer once the restored VM serves, as a create does: the caller's
	// next command goes to it.
	ready, err := s.waitUsable(r.Context(), sbx.Namespace, sbx.Name, gen)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, s.sandboxJSON(r.Context(), ready), nil
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

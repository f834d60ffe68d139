package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// setTimeout makes the sandbox expire timeout seconds from now: the
// Sandbox's timeout counts from its creation or last resume.
func (s *Server) setTimeout(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		return 0, nil, err
	}
	secs, err := seconds("timeout", body.Timeout, 0)
	if err != nil {
		return 0, nil, err
	}
	return s.expireIn(r, secs)
}

// refresh keeps the sandbox alive duration seconds (default E2B's 300) from now.
func (s *Server) refresh(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		return 0, nil, err
	}
	secs := int64(sandlotv1.DefaultTimeoutSeconds)
	if body.Duration != nil {
		if *body.Duration < 0 || *body.Duration > 3600 {
			return 0, nil, errorf(http.StatusBadRequest, "field \"duration\": %d is outside 0..3600 seconds", *body.Duration)
		}
		secs = *body.Duration
	}
	return s.expireIn(r, secs)
}

func (s *Server) expireIn(r *http.Request, secs int64) (int, any, *apiError) {
	sbx, err := s.sandbox(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return 0, nil, err
	}
	if err := s.patchSpec(r.Context(), sbx, map[string]any{"timeoutSeconds": s.timeoutFromNow(sbx, secs)}); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// timeoutFromNow is the spec timeout that ends secs from now.
func (s *Server) timeoutFromNow(sbx *sandlotv1.Sandbox, secs int64) int64 {
	base := sbx.CreationTimestamp.Time
	if sbx.Status.LastResumedAt != nil {
		base = sbx.Status.LastResumedAt.Time
	}
	elapsed := int64(s.now().Sub(base).Seconds() + 0.999)
	return max(1, min(elapsed+secs, maxTimeoutSeconds))
}

// patchSpec merge-patches spec fields, guarded by the UID (a sandbox
// deleted and made again under the same name is not patched).
func (s *Server) patchSpec(ctx context.Context, sbx *sandlotv1.Sandbox, spec map[string]any) *apiError {
	patch := map[string]any{"metadata": map[string]any{"uid": sbx.UID}, "spec": spec}
	if err := s.kube.Patch(ctx, sbx, client.RawPatch(types.MergePatchType, mustJSON(patch))); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return errorf(http.StatusNotFound, "sandbox %q not found", sandlotv1.SandboxIDFor(sbx.UID))
		}
		return kubeError("update the sandbox", err)
	}
	// Reads come from the cache: the call returns once the cache holds
	// the change, so a client reading its own write next (the SDK's
	// setTimeout, then getInfo) never sees the sandbox as it was.
	return s.kube.waitSeen(ctx, sbx)
}

// pause pauses a running sandbox and returns once it is paused; 409
// when it is paused (or pausing) already.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body pauseBody
	if err := decodeBody(r, &body); err != nil {
		return 0, nil, err
	}
	sbx, err := s.sandbox(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return 0, nil, err
	}
	if paused(sbx) {
		return 0, nil, errorf(http.StatusConflict, "sandbox %q is already paused", r.PathValue("id"))
	}
	if body.RequireHealthyGuest != nil && *body.RequireHealthyGuest {
		if err := s.envdHealthy(r.Context(), sbx); err != nil {
			return 0, nil, errorf(http.StatusServiceUnavailable, "sandbox %q not paused: its guest agent does not answer (requireHealthyGuest): %v", r.PathValue("id"), err)
		}
	}
	if err := s.allowOperation(w, r, "pause"); err != nil {
		return 0, nil, err
	}
	// memory false: a filesystem-only pause, resumed by a boot on its disk.
	if err := s.patchSpec(r.Context(), sbx, map[string]any{"paused": true, "resumeBy": resumeBy(body.Memory)}); err != nil {
		return 0, nil, err
	}
	err = s.kube.waitFor(r.Context(), s.cfg.PauseTimeout, "pause of "+r.PathValue("id"), func() (bool, *apiError) {
		if err := s.kube.Get(r.Context(), client.ObjectKeyFromObject(sbx), sbx); err != nil {
			return false, errorf(http.StatusNotFound, "sandbox %q was deleted while it paused", r.PathValue("id"))
		}
		if sbx.Status.Phase.Terminal() {
			return false, errorf(http.StatusInternalServerError, "pause of %s failed: %s: %s", r.PathValue("id"), sbx.Status.Reason, sbx.Status.Message)
		}
		return sbx.Status.Phase == sandlotv1.SandboxPaused, nil
	})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// resumeBy is spec.resumeBy for a pause whose body says memory (nil:
// true, the default: a restore, the field cleared).
func resumeBy(memory *bool) any {
	if memory != nil && !*memory {
		return sandlotv1.ResumeBoot
	}
	return nil
}

// resume is the old resume: 409 when the sandbox runs.
func (s *Server) resume(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		return 0, nil, err
	}
	sbx, err := s.sandbox(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return 0, nil, err
	}
	if !paused(sbx) {
		return 0, nil, errorf(http.StatusConflict, "sandbox %q is already running", r.PathValue("id"))
	}
	if err := s.allowOperation(w, r, "resume"); err != nil {
		return 0, nil, err
	}
	return s.resumeAndWait(r.Context(), sbx, body.Timeout)
}

// connect returns a running sandbox (200, its timeout extended when
// asked) or resumes a paused one (201).
func (s *Server) connect(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var body connectBody
	if err := decodeBody(r, &body); err != nil {
		return 0, nil, err
	}
	if body.Timeout != nil {
		if _, err := seconds("timeout", body.Timeout, 0); err != nil {
			return 0, nil, err
		}
	}
	sbx, err := s.sandbox(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return 0, nil, err
	}
	if paused(sbx) {
		if err := s.allowOperation(w, r, "resume"); err != nil {
			return 0, nil, err
		}
		if body.Memory != nil && !*body.Memory {
			// A reboot-resume: the paused memory is not restored.
			if err := s.patchSpec(r.Context(), sbx, map[string]any{"resumeBy": sandlotv1.ResumeBoot}); err != nil {
				return 0, nil, err
			}
		}
		return s.resumeAndWait(r.Context(), sbx, body.Timeout)
	}
	if body.Timeout != nil && *body.Timeout > 0 && s.extends(sbx, *body.Timeout) {
		if err := s.patchSpec(r.Context(), sbx, map[string]any{"timeoutSeconds": s.timeoutFromNow(sbx, *body.Timeout)}); err != nil {
			return 0, nil, err
		}
	}
	ready, err := s.waitUsable(r.Context(), sbx.Namespace, sbx.Name, 0)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, s.sandboxJSON(r.Context(), ready), nil
}

// extends: a connect's timeout only ever lengthens a sandbox's life.
func (s *Server) extends(sbx *sandlotv1.Sandbox, secs int64) bool {
	return sbx.Status.ExpiresAt == nil || s.now().Add(time.Duration(secs)*time.Second).After(sbx.Status.ExpiresAt.Time)
}

// resumeAndWait unpauses the sandbox (its timeout counted again from now)
// and waits until its VM is ready: 201.
func (s *Server) resumeAndWait(ctx context.Context, sbx *sandlotv1.Sandbox, timeout *int64) (int, any, *apiError) {
	spec := map[string]any{"paused": false}
	if timeout != nil && *timeout > 0 {
		spec["timeoutSeconds"] = min(*timeout, maxTimeoutSeconds)
	}
	if err := s.patchSpec(ctx, sbx, spec); err != nil {
		return 0, nil, err
	}
	ready, err := s.waitUsable(ctx, sbx.Namespace, sbx.Name, sbx.Generation)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, s.sandboxJSON(ctx, ready), nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	return b
}

package podspec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/controllers/writes"
)

// A Sandbox's envd token lives in two places: the Secret its pod's env
// refers to (Env), which clients are given the token from (sandlot-api,
// the suites), and the VM, which took the token when it booted and keeps
// it. A token drawn again while that VM runs opens nothing: the guest
// refuses every client, with no sign of why. So the Secret is held by
// FinalizerTokenInUse for the Sandbox's life, and a token is drawn only
// when no pod of the sandbox exists: the next pod boots with it.

// Tokens keeps the Sandboxes' token Secrets: it draws a token, holds
// the Secret, reports a held deletion, and lets the Secret go with its
// Sandbox.
type Tokens struct {
	Client client.Client
	// APIReader confirms past the cache that a Secret or Sandbox is gone.
	APIReader client.Reader
	// Recorder records held deletions (nil: none).
	Recorder events.EventRecorder

	// reported is, per Sandbox, the UID of the token Secret whose held
	// deletion it reported.
	reported sync.Map // types.NamespacedName → types.UID
}

// tokenWorld is what the token decision reads.
type tokenWorld struct {
	// Found: the Secret exists, its deletion under way or not. Ours: the
	// Sandbox controls it. Held: it carries FinalizerTokenInUse.
	// Deleting: its deletionTimestamp is set.
	Found, Ours, Held, Deleting bool
	// Pod: a pod of the sandbox exists, whose VM may run with the token.
	Pod bool
}

// tokenAction is what Ensure does about the token Secret.
type tokenAction int

const (
	tokenKeep       tokenAction = iota // nothing to do
	tokenDraw                          // create the Secret with a new token
	tokenHold                          // add the finalizer (an older controller's Secret)
	tokenReportHeld                    // a deletion is held: an Event, once
	tokenLost                          // gone under a pod: nothing drawn, the sandbox says why
)

// decideToken is what to do about a sandbox's token Secret. A Secret
// being deleted still exists: its token stays readable. One of that name
// the Sandbox does not control is used as it is and never touched. An
// older controller's Secret being deleted can no longer take a finalizer
// (the API server refuses one on a deleting object): once it is gone the
// sandbox draws again or says the token is lost.
func decideToken(w tokenWorld) tokenAction {
	switch {
	case !w.Found && w.Pod:
		return tokenLost
	case !w.Found:
		return tokenDraw
	case !w.Ours:
		return tokenKeep
	case w.Deleting && w.Held:
		return tokenReportHeld
	case !w.Deleting && !w.Held:
		return tokenHold
	}
	return tokenKeep
}

func tokenKey(namespace, sandbox string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: sandlotv1.TokenSecretName(sandbox)}
}

// Ensure gives sbx its token Secret, held by the finalizer. hasPod says
// whether a pod of sbx exists (asked only when the cache has no Secret).
// lost: the Secret is gone while a pod exists; no token was drawn
// (MarkTokenLost says so on the sandbox).
func (t *Tokens) Ensure(ctx context.Context, sbx *sandlotv1.Sandbox, hasPod func() (bool, error)) (lost bool, err error) {
	secret, w, err := t.observe(ctx, sbx, hasPod)
	if err != nil {
		return false, err
	}
	switch decideToken(w) {
	case tokenDraw:
		return false, t.draw(ctx, sbx)
	case tokenHold:
		return false, t.hold(ctx, secret, true)
	case tokenReportHeld:
		t.reportHeld(sbx, secret)
	case tokenLost:
		return true, nil
	}
	return false, nil
}

// observe reads the token Secret and, when the cache has none, whether a
// pod of the sandbox exists. With a pod, the cache's "none" is confirmed
// on the API server (the cache lags its own writes, and that absence
// keeps the sandbox from a token for good); without one, the create that
// follows settles it.
func (t *Tokens) observe(ctx context.Context, sbx *sandlotv1.Sandbox, hasPod func() (bool, error)) (*corev1.Secret, tokenWorld, error) {
	var w tokenWorld
	key := tokenKey(sbx.Namespace, sbx.Name)
	secret := &corev1.Secret{}
	err := t.Client.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		pod, perr := hasPod()
		if perr != nil {
			return nil, w, perr
		}
		if w.Pod = pod; pod {
			err = t.APIReader.Get(ctx, key, secret)
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, w, nil
	case err != nil:
		return nil, w, fmt.Errorf("get token secret %s: %w", key, err)
	}
	w.Found, w.Ours = true, metav1.IsControlledBy(secret, sbx)
	w.Held = controllerutil.ContainsFinalizer(secret, sandlotv1.FinalizerTokenInUse)
	w.Deleting = secret.DeletionTimestamp != nil
	return secret, w, nil
}

// draw creates the Secret with a new token, held from its creation.
func (t *Tokens) draw(ctx context.Context, sbx *sandlotv1.Sandbox) error {
	key := tokenKey(sbx.Namespace, sbx.Name)
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return fmt.Errorf("draw access token: %w", err)
	}
	err := t.Client.Create(ctx, tokenSecret(sbx, hex.EncodeToString(buf)))
	if apierrors.IsAlreadyExists(err) {
		// Ours and not yet in the cache, or someone else's by that name.
		existing := &corev1.Secret{}
		if err := t.APIReader.Get(ctx, key, existing); err != nil {
			return fmt.Errorf("get token secret %s: %w", key, err)
		}
		if !metav1.IsControlledBy(existing, sbx) {
			return fmt.Errorf("secret %s exists and is not owned by sandbox %s: rename or delete it", key, sbx.Name)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("create token secret %s: %w", key, err)
	}
	return nil
}

// tokenSecret holds the envd access token of a Sandbox, held by the
// Sandbox from its creation. (Its env reaches a claimed pool VM sealed in
// the claim: controllers/sandbox/seal.go.)
func tokenSecret(sbx *sandlotv1.Sandbox, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            sandlotv1.TokenSecretName(sbx.Name),
			Namespace:       sbx.Namespace,
			Labels:          map[string]string{sandlotv1.LabelSandbox: sbx.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sbx, sandlotv1.GroupVersion.WithKind("Sandbox"))},
			Finalizers:      []string{sandlotv1.FinalizerTokenInUse},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{sandlotv1.TokenSecretKey: []byte(token)},
	}
}

// hold adds (on) or removes FinalizerTokenInUse on secret. A merge patch
// replaces the whole finalizer list, so it is guarded by the copy's
// resourceVersion: another's finalizer is neither dropped nor brought
// back by a stale copy (a conflict is retried).
func (t *Tokens) hold(ctx context.Context, secret *corev1.Secret, on bool) error {
	orig := secret.DeepCopy()
	verb, changed := "add", false
	if on {
		changed = controllerutil.AddFinalizer(secret, sandlotv1.FinalizerTokenInUse)
	} else {
		verb, changed = "remove", controllerutil.RemoveFinalizer(secret, sandlotv1.FinalizerTokenInUse)
	}
	if !changed {
		return nil
	}
	err := t.Client.Patch(ctx, secret, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("%s finalizer %s of secret %s: %w", verb, sandlotv1.FinalizerTokenInUse, secret.Name, err)
	}
	return nil
}

// reportHeld records on sbx that a deletion of its token Secret is held,
// once per deletion (a deletion, once begun, is never undone: the
// Secret's UID names it), not at every reconcile. Remembered in memory
// only: a restarted controller reports a deletion still held once more.
func (t *Tokens) reportHeld(sbx *sandlotv1.Sandbox, secret *corev1.Secret) {
	prev, seen := t.reported.Swap(client.ObjectKeyFromObject(sbx), secret.UID)
	if (seen && prev == secret.UID) || t.Recorder == nil {
		return
	}
	t.Recorder.Eventf(sbx, secret, corev1.EventTypeWarning, sandlotv1.ReasonTokenSecretDeletionHeld, "HoldTokenSecret",
		"deletion of Secret %s held by finalizer %s: the sandbox's VM runs with the token it holds, so the Secret stays "+
			"readable until the Sandbox is deleted", secret.Name, sandlotv1.FinalizerTokenInUse)
}

// Forget drops what is remembered of a Sandbox that is gone.
func (t *Tokens) Forget(key types.NamespacedName) { t.reported.Delete(key) }

// Release lets sbx's token Secret go, at the end of its finalize: the
// finalizer off, then the Secret deleted (unless its deletion, held, is
// under way). A Secret the cache does not show is looked up on the API
// server: one left held would stay forever, its owner gone.
func (t *Tokens) Release(ctx context.Context, sbx *sandlotv1.Sandbox) error {
	key := tokenKey(sbx.Namespace, sbx.Name)
	secret := &corev1.Secret{}
	err := t.Client.Get(ctx, key, secret)
	if apierrors.IsNotFound(err) {
		err = t.APIReader.Get(ctx, key, secret)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get token secret %s: %w", key, err)
	}
	if !metav1.IsControlledBy(secret, sbx) { // a user's Secret of that name stays
		return nil
	}
	if err := t.hold(ctx, secret, false); err != nil || secret.DeletionTimestamp != nil {
		return err
	}
	uid := secret.UID
	if err := t.Client.Delete(ctx, secret, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete token secret %s: %w", key, err)
	}
	return nil
}

// ReleaseOrphan lets go the held token Secret of a Sandbox (key) that is
// gone without its finalize (its finalizer removed by hand): the garbage
// collector's deletion of the Secret would be held forever. Only a
// Secret whose deletion is under way, and only once the API server
// confirms its Sandbox gone (the cache may lag one just made).
func (t *Tokens) ReleaseOrphan(ctx context.Context, key types.NamespacedName) error {
	secret := &corev1.Secret{}
	if err := t.Client.Get(ctx, tokenKey(key.Namespace, key.Name), secret); err != nil {
		return client.IgnoreNotFound(err)
	}
	owner := metav1.GetControllerOf(secret)
	if owner == nil || owner.Kind != "Sandbox" || owner.Name != key.Name || secret.DeletionTimestamp == nil ||
		!controllerutil.ContainsFinalizer(secret, sandlotv1.FinalizerTokenInUse) {
		return nil
	}
	sbx := &sandlotv1.Sandbox{}
	err := t.APIReader.Get(ctx, key, sbx)
	if err == nil && sbx.UID == owner.UID {
		return nil // not an orphan: its finalize releases it
	}
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("get sandbox %s: %w", key, err)
	}
	return t.hold(ctx, secret, false)
}

// TokenSecretEvents passes the token Secret events a Sandbox acts on
// (tokenSecretMatters), and every deletion.
func TokenSecretEvents() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return tokenSecretMatters(nil, e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return tokenSecretMatters(e.ObjectOld, e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// tokenSecretMatters: the change from old (nil: cur is first seen) to
// cur is one the Sandbox acts on — a deletion begun, a finalizer added
// or removed, a Secret first seen unheld (an older controller's, one
// restored by hand) or deleting (at a start: an orphan's, held) — and
// not the controller's own create at every start.
func tokenSecretMatters(old, cur client.Object) bool {
	deleting := cur.GetDeletionTimestamp() != nil
	if old == nil {
		return deleting || !controllerutil.ContainsFinalizer(cur, sandlotv1.FinalizerTokenInUse)
	}
	return deleting != (old.GetDeletionTimestamp() != nil) || !slices.Equal(old.GetFinalizers(), cur.GetFinalizers())
}

// MarkTokenLost says on Ready that the token Secret is gone under the
// sandbox's pod (Ensure's lost), as long as the sandbox has a pod and has
// not ended. Why Ready rather than a condition of its own: no client can
// be given the token the VM accepts, so the sandbox is ready for nobody,
// and Ready is what `kubectl get sandbox` shows. The phase stays as the
// pod says (the VM runs, may be paused and resumed): the sandbox is not
// failed, its data is whole, and a pause and resume is the way out (its
// next pod boots with a new token). Deleting the running pod to boot one
// with a new token would lose what the VM holds. prev is Ready before
// this reconcile wrote it from the pod: its transition time is kept when
// it said this already, or every reconcile would write the status again
// (and wake itself with the write).
func MarkTokenLost(sbx *sandlotv1.Sandbox, prev *metav1.Condition) {
	st := &sbx.Status
	if st.PodName == "" || st.Phase.Terminal() {
		return
	}
	msg := fmt.Sprintf("token Secret %s was deleted while pod %s exists: its VM keeps the token it booted with, "+
		"which no client can be given now; no new token is drawn under it. Pause and resume the sandbox "+
		"(its next pod boots with a new token) or delete it", sandlotv1.TokenSecretName(sbx.Name), st.PodName)
	writes.SetCondition(&st.Conditions, sbx.Generation, sandlotv1.ConditionReady, metav1.ConditionFalse, sandlotv1.ReasonTokenSecretLost, msg)
	if prev != nil && prev.Status == metav1.ConditionFalse && prev.Reason == sandlotv1.ReasonTokenSecretLost {
		meta.FindStatusCondition(st.Conditions, sandlotv1.ConditionReady).LastTransitionTime = prev.LastTransitionTime
	}
}

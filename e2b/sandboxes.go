package e2b

import (
	"cmp"
	"context"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// Annotations the API sets on the Sandboxes it creates.
const (
	// AnnotationTemplateID is the templateID the client asked for.
	AnnotationTemplateID = "e2b.sandlot.dev/template-id"
	// AnnotationAutoResume ("true"): traffic to the paused sandbox resumes it.
	AnnotationAutoResume = "e2b.sandlot.dev/auto-resume"
)

// defaultTemplateIDs are what the SDKs send when the caller names none
// (mcp-gateway: with the mcp option; sandlot's images ship the gateway).
var defaultTemplateIDs = map[string]bool{"base": true, "code-interpreter-v1": true, "code-interpreter": true, "mcp-gateway": true}

var sandboxIDPattern = regexp.MustCompile(`^[a-z0-9]{20}$`)

// createSandbox is charged to the key's create rate once the request is
// valid (a malformed one costs nothing) and before anything is looked up.
func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) (code int, body any, aerr *apiError) {
	stage := createRequest
	defer func() { observeCreateFailure(stage, aerr) }()
	var req newSandbox
	if err := decodeBody(r, &req); err != nil {
		return 0, nil, err
	}
	if err := req.validate(); err != nil {
		return 0, nil, err
	}
	if err := s.allowCreate(w, r, 1); err != nil {
		return 0, nil, err
	}
	stage = createResolve
	source, err := s.resolveTemplate(r.Context(), req.TemplateID)
	if err != nil {
		return 0, nil, err
	}
	stage = createRequest
	if err := s.mountableVolumes(r.Context(), req.VolumeMounts); err != nil {
		return 0, nil, err
	}
	sbx, err := s.newSandboxObject(teamOf(r.Context()), &req, source)
	if err != nil {
		return 0, nil, err
	}
	if err := s.proxyRefusal(r.Context(), "network.", sbx.Spec.Network.Proxy()); err != nil {
		return 0, nil, err
	}
	if err := s.prepareEgressSecret(r.Context(), sbx.Namespace, sbx.Spec.Network, req.proxyPassword); err != nil {
		return 0, nil, err
	}
	stage = createStart
	if err := s.kube.Create(r.Context(), sbx); err != nil {
		s.ownEgressSecret(r.Context(), sbx, true)
		return 0, nil, kubeError("create the sandbox", err)
	}
	s.ownEgressSecret(r.Context(), sbx, false)
	stage = createWait
	if sbx, err = s.awaitStart(r.Context(), sbx); err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, s.sandboxJSON(r.Context(), sbx), nil
}

// newSandboxObject is the Sandbox of source that req asks for.
func (s *Server) newSandboxObject(ns string, req *newSandbox, source sandlotv1.SandboxSource) (*sandlotv1.Sandbox, *apiError) {
	network, private, err := req.network()
	if err != nil {
		return nil, err
	}
	if err := s.platformRefusal("network.", network); err != nil {
		return nil, err
	}
	sbx := &sandlotv1.Sandbox{
		// The controller's finalizer comes with the create: its own
		// update adding it would be one more write on each start's path.
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2b-", Namespace: ns, Finalizers: []string{sandlotv1.FinalizerSandboxVM},
			Annotations: map[string]string{AnnotationTemplateID: req.TemplateID}},
		Spec: sandlotv1.SandboxSpec{Source: source, Metadata: req.Metadata, Env: envList(req.EnvVars), Network: network,
			VolumeMounts: req.VolumeMounts},
	}
	if req.Timeout != nil && *req.Timeout > 0 {
		sbx.Spec.TimeoutSeconds = ptr.To(int32(*req.Timeout))
	}
	if req.AutoPause != nil && *req.AutoPause {
		sbx.Spec.OnTimeout = sandlotv1.TimeoutPause
		if req.AutoPauseMemory != nil && !*req.AutoPauseMemory {
			sbx.Spec.ResumeBy = sandlotv1.ResumeBoot // the timeout's pause keeps the disk only
		}
	}
	if req.AutoResume != nil && req.AutoResume.Enabled {
		sbx.Annotations[AnnotationAutoResume] = "true"
	}
	if private {
		sbx.Annotations[AnnotationPrivateTraffic] = "true"
	}
	if n := req.Network; n != nil && n.MaskRequestHost != nil && *n.MaskRequestHost != "" {
		sbx.Annotations[AnnotationMaskRequestHost] = *n.MaskRequestHost
	}
	return sbx, nil
}

// startSandbox creates sbx and waits until it is usable; a sandbox that
// does not get there is deleted.
func (s *Server) startSandbox(ctx context.Context, sbx *sandlotv1.Sandbox) (*sandlotv1.Sandbox, *apiError) {
	if err := s.kube.Create(ctx, sbx); err != nil {
		return nil, kubeError("create the sandbox", err)
	}
	return s.awaitStart(ctx, sbx)
}

// awaitStart waits until the created sbx is usable; one that does not
// get there is deleted.
func (s *Server) awaitStart(ctx context.Context, sbx *sandlotv1.Sandbox) (*sandlotv1.Sandbox, *apiError) {
	ready, aerr := s.waitUsable(ctx, sbx.Namespace, sbx.Name, sbx.Generation)
	if aerr != nil {
		// Nothing half-made stays behind a failed create.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := s.kube.Delete(dctx, sbx); err == nil {
			aerr.Message += " (the sandbox was deleted)"
		}
		return nil, aerr
	}
	return ready, nil
}

// resolveTemplate maps a templateID onto a Sandbox source: the team's
// Template of that name (or its copy of a public one), else its Snapshot
// of that name, else a public template of another team (copied), else
// the default Template (the team's, or a public one) for the SDKs'
// default IDs.
func (s *Server) resolveTemplate(ctx context.Context, id string) (sandlotv1.SandboxSource, *apiError) {
	// The SDKs' default IDs are the platform's default template before any
	// public template: another team publishing a template named "base"
	// must not answer every other team's Sandbox.create().
	if name, tag, ok := strings.Cut(id, ":"); ok { // "name:tag" (tags: templatetags.go)
		if aerr := s.resolveTag(ctx, name, tag); aerr != nil {
			return sandlotv1.SandboxSource{}, aerr
		}
		id = name
	}
	if defaultTemplateIDs[id] {
		return s.resolveDefault(ctx, id)
	}
	if name, ok, err := s.ownTemplate(ctx, id); err != nil || ok {
		return sandlotv1.SandboxSource{Template: name}, err
	}
	if err := s.kube.Get(ctx, client.ObjectKey{Namespace: teamOf(ctx), Name: id}, &sandlotv1.Snapshot{}); err == nil {
		return sandlotv1.SandboxSource{Snapshot: id}, nil
	}
	if name, ok, err := s.publicCopy(ctx, id); err != nil || ok {
		return sandlotv1.SandboxSource{Template: name}, err
	}
	return sandlotv1.SandboxSource{}, errorf(http.StatusNotFound, "template %q not found: no Template or Snapshot of that name "+
		"in namespace %s, and no public template of that name (another team's public template is named <namespace>/<name>)", id, teamOf(ctx))
}

// resolveDefault resolves a default template ID onto the team's own
// template of that name (not a copy of another team's: an earlier create
// may have made one), else the team's default template, else the API's
// own namespace's when it publishes it — never another team's.
func (s *Server) resolveDefault(ctx context.Context, id string) (sandlotv1.SandboxSource, *apiError) {
	own := &sandlotv1.Template{}
	if s.kube.Get(ctx, client.ObjectKey{Namespace: teamOf(ctx), Name: id}, own) == nil &&
		own.Annotations[AnnotationPublicSource] == "" {
		return sandlotv1.SandboxSource{Template: id}, nil
	}
	def := s.cfg.DefaultTemplate
	mine := &sandlotv1.Template{}
	err := s.kube.Get(ctx, client.ObjectKey{Namespace: teamOf(ctx), Name: def}, mine)
	// A copy of another team's public template named like the default
	// (made by an earlier version's fallback) is replaced by the API
	// namespace's default below.
	if src := mine.Annotations[AnnotationPublicSource]; err == nil &&
		(src == "" || strings.HasPrefix(src, s.cfg.Namespace+"/")) {
		if name, ok, err := s.ownTemplate(ctx, def); err != nil || ok {
			return sandlotv1.SandboxSource{Template: name}, err
		}
	}
	if teamOf(ctx) != s.cfg.Namespace {
		if name, ok, err := s.publicCopy(ctx, s.cfg.Namespace+"/"+def); err != nil || ok {
			return sandlotv1.SandboxSource{Template: name}, err
		}
	}
	return sandlotv1.SandboxSource{}, errorf(http.StatusNotFound, "template %q resolves to the default template %q, "+
		"which does not exist in namespace %s and is not public in the API's namespace %s", id, def, teamOf(ctx), s.cfg.Namespace)
}

func envList(m map[string]string) []sandlotv1.EnvVar {
	var out []sandlotv1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, sandlotv1.EnvVar{Name: k, Value: m[k]})
	}
	return out
}

// waitUsable waits until the sandbox's VM is ready for generation gen or
// later (a resume bumps the generation: an older VMReady is the VM that
// was paused), running, with a pod IP and its token Secret.
func (s *Server) waitUsable(ctx context.Context, ns, name string, gen int64) (*sandlotv1.Sandbox, *apiError) {
	sbx := &sandlotv1.Sandbox{}
	err := s.kube.waitFor(ctx, s.cfg.CreateTimeout, "sandbox "+name+" ready", func() (bool, *apiError) {
		if err := s.kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sbx); err != nil {
			return false, nil // not in the cache yet
		}
		if sbx.DeletionTimestamp != nil {
			return false, errorf(http.StatusGone, "sandbox %s was deleted while it started", sandlotv1.SandboxIDFor(sbx.UID))
		}
		if sbx.Status.Phase.Terminal() {
			return false, errorf(http.StatusInternalServerError, "sandbox %s failed to start: %s: %s",
				sandlotv1.SandboxIDFor(sbx.UID), sbx.Status.Reason, sbx.Status.Message)
		}
		return sbx.Usable(gen) && s.token(ctx, sbx) != "", nil
	})
	return sbx, err
}

// token is the sandbox's envd access token ("" while its Secret is not made).
func (s *Server) token(ctx context.Context, sbx *sandlotv1.Sandbox) string {
	secret := &corev1.Secret{}
	if err := s.kube.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: sandlotv1.TokenSecretName(sbx.Name)}, secret); err != nil {
		return ""
	}
	return string(secret.Data[sandlotv1.TokenSecretKey])
}

func (s *Server) sandboxJSON(ctx context.Context, sbx *sandlotv1.Sandbox) *sandboxJSON {
	out := &sandboxJSON{TemplateID: templateIDOf(sbx), SandboxID: sandlotv1.SandboxIDFor(sbx.UID), ClientID: s.cfg.ClientID,
		EnvdVersion: s.cfg.EnvdVersion, EnvdAccessToken: s.token(ctx, sbx), Domain: s.cfg.Domain}
	// Every sandbox's: it gates the ports of a private one, and the
	// code-interpreter SDK sends only it on its context routes
	// (contextAccess), whatever the sandbox's traffic.
	out.TrafficAccessToken = trafficToken(out.EnvdAccessToken)
	return out
}

func templateIDOf(sbx *sandlotv1.Sandbox) string {
	if id := sbx.Annotations[AnnotationTemplateID]; id != "" {
		return id
	}
	return cmp.Or(sbx.Spec.Source.Template, sbx.Spec.Source.Snapshot)
}

// sandbox finds a sandbox by ID: 404 when there is none, it is being
// deleted, or (unless withEnded) it ended.
func (s *Server) sandbox(ctx context.Context, id string, withEnded bool) (*sandlotv1.Sandbox, *apiError) {
	notFound := errorf(http.StatusNotFound, "sandbox %q not found", id)
	if !sandboxIDPattern.MatchString(id) {
		return nil, notFound
	}
	list := &sandlotv1.SandboxList{}
	if err := s.kube.List(ctx, list, client.InNamespace(teamOf(ctx)), client.MatchingFields{indexSandboxID: id}); err != nil {
		return nil, kubeError("look up the sandbox", err)
	}
	for i := range list.Items {
		if sbx := &list.Items[i]; listed(sbx) && (withEnded || !sbx.Status.Phase.Terminal()) {
			return sbx, nil
		}
	}
	return nil, notFound
}

// listed: users' sandboxes, not being deleted (template builders are the
// controller's own).
func listed(sbx *sandlotv1.Sandbox) bool {
	return sbx.DeletionTimestamp == nil && sbx.Annotations[sandlotv1.AnnotationBaseOf] == ""
}

// paused: its user paused it. A sandbox a drain moves to another node
// (paused there, resumed here) is running to its clients.
func paused(sbx *sandlotv1.Sandbox) bool {
	if moving(sbx) {
		return false
	}
	return sbx.Spec.Paused || sbx.Status.Phase == sandlotv1.SandboxPaused || sbx.Status.Phase == sandlotv1.SandboxPausing
}

// moving: a drain moves the sandbox (controllers/drain), not its user.
func moving(sbx *sandlotv1.Sandbox) bool {
	return !sbx.Spec.Paused && sbx.Annotations[sandlotv1.AnnotationMoveFrom] != ""
}

func state(sbx *sandlotv1.Sandbox) string {
	if paused(sbx) {
		return "paused"
	}
	return "running"
}

// detail is a SandboxDetail when full (GET /sandboxes/{id}: with the
// envd token and the network rules), a ListedSandbox otherwise.
func (s *Server) detail(ctx context.Context, sbx *sandlotv1.Sandbox, full bool) *sandboxDetail {
	started := startedAt(sbx)
	end := expiresAt(sbx)
	d := &sandboxDetail{TemplateID: templateIDOf(sbx), SandboxID: sandlotv1.SandboxIDFor(sbx.UID), ClientID: s.cfg.ClientID,
		StartedAt: started.UTC().Format(time.RFC3339Nano), EndAt: end.UTC().Format(time.RFC3339Nano),
		EnvdVersion: s.cfg.EnvdVersion, Domain: s.cfg.Domain, Metadata: sbx.Spec.Metadata, State: state(sbx),
		Lifecycle: &lifecycleJSON{OnTimeout: "kill", AutoResume: sbx.Annotations[AnnotationAutoResume] == "true"}}
	d.VolumeMounts = s.mountsOf(ctx, sbx)
	if d.Metadata == nil {
		d.Metadata = map[string]string{}
	}
	if sbx.Spec.OnTimeout == sandlotv1.TimeoutPause {
		d.Lifecycle.OnTimeout = "pause"
	}
	if res := sbx.Status.Resources; res != nil {
		d.CPUCount, d.MemoryMB = res.VCPU, res.MemoryMiB
	}
	if full {
		d.EnvdAccessToken = s.token(ctx, sbx)
		d.Network = networkOf(sbx)
		if n := sbx.Spec.Network; n != nil {
			d.AllowInternetAccess = n.AllowInternetAccess
		}
	}
	return d
}

// expiresAt is when the sandbox ends: the controller's rule (the spec's
// timeout counted from creation or the last resume) applied at once, so
// a timeout just set shows before the controller has seen it.
func expiresAt(sbx *sandlotv1.Sandbox) time.Time {
	base := sbx.CreationTimestamp.Time
	if sbx.Status.LastResumedAt != nil {
		base = sbx.Status.LastResumedAt.Time
	}
	switch {
	case sbx.Spec.TimeoutSeconds != nil:
		return base.Add(time.Duration(*sbx.Spec.TimeoutSeconds) * time.Second)
	case sbx.Status.ExpiresAt != nil:
		return sbx.Status.ExpiresAt.Time
	}
	return base.Add(sandlotv1.DefaultTimeoutSeconds * time.Second)
}

func (s *Server) getSandbox(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	sbx, err := s.sandbox(r.Context(), r.PathValue("id"), false)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, s.detail(r.Context(), sbx, true), nil
}

func (s *Server) killSandbox(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	sbx, err := s.sandbox(r.Context(), r.PathValue("id"), true)
	if err != nil {
		return 0, nil, err
	}
	if err := s.kube.Delete(r.Context(), sbx, client.Preconditions{UID: &sbx.UID}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return 0, nil, errorf(http.StatusNotFound, "sandbox %q not found", r.PathValue("id"))
		}
		return 0, nil, kubeError("delete the sandbox", err)
	}
	// Answered once the cache shows it going: a second kill right after
	// must find it gone (404), as E2B's does.
	_ = s.kube.waitGoing(r.Context(), sbx)
	return http.StatusNoContent, nil, nil
}

// kubeError maps an API server error onto the E2B API: its own status
// for client errors, 500 otherwise.
func kubeError(what string, err error) *apiError {
	code := http.StatusInternalServerError
	if st, ok := err.(apierrors.APIStatus); ok {
		if c := int(st.Status().Code); c >= 400 && c < 500 {
			code = c
		}
	}
	// The team's ResourceQuota (count/sandboxes.sandlot.dev): E2B's
	// concurrent-sandbox limit answers 429; the message names the limit.
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota") {
		code = http.StatusTooManyRequests
	}
	return errorf(code, "%s: %v", what, err)
}

// Package e2b serves E2B's REST API over sandlot's CRDs, and proxies the
// SDK's traffic to sandboxes (envd, the code interpreter, any port) to
// their pods. It talks only to the Kubernetes API: creating a sandbox is
// creating a Sandbox and watching it until its VM is ready.
package e2b

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sandlot-dev/sandlot/api/node"
)

// DefaultEnvdVersion is the envd API version sandlot-guest implements
// (guest/envd.Version); the SDK gates features on it.
const DefaultEnvdVersion = "0.6.4"

// Config shapes a Server.
type Config struct {
	// Namespace holds the sandboxes, snapshots and templates of the API's
	// own team, and every team's keys Secrets.
	Namespace string
	// Teams are the other teams' namespaces (teams.go).
	Teams []string
	// VolumeDir is the volume storage every node mounts (the chart's
	// volumes.hostPath), mounted here at the same path; "" disables
	// volumes (volumes.go).
	VolumeDir string
	// DefaultTemplate is the Template the SDKs' default template IDs
	// (base, code-interpreter-v1) name, unless a Template of that name exists.
	DefaultTemplate string
	// Domain is returned to the SDK: with it the SDK reaches port p of a
	// sandbox at https://<p>-<sandboxID>.<Domain> (wildcard DNS and TLS
	// pointing at this server). May carry a port.
	Domain string
	// KeysSecret is the Secret (in Namespace) whose values are the API keys.
	KeysSecret string
	// EnvdVersion is reported for every sandbox.
	EnvdVersion string
	// ClientID is reported for every sandbox.
	ClientID string
	// CreateTimeout bounds a create, resume or fork until the VM is ready;
	// PauseTimeout a pause and SnapshotTimeout a snapshot.
	CreateTimeout, PauseTimeout, SnapshotTimeout time.Duration
	// MaxBodyBytes bounds control-plane request bodies (not proxied ones).
	MaxBodyBytes int64
	// CreateRate is how many sandboxes an API key may create a second on
	// average (POST /sandboxes, /v2/sandboxes, each of a fork's), and
	// CreateBurst how many at once (at least 1; default: the rate rounded
	// up). 0 (or less): no limit.
	CreateRate  float64
	CreateBurst int
	// MaxBuildFiles and MaxBuildFilesBytes bound the COPY steps' uploaded
	// files a team keeps, MaxPendingBuilds the builds it has requested and
	// not started (buildquota.go); 0 (or less): the defaults. UploadRate
	// is how many upload links and uploads a team may ask for a second on
	// average, UploadBurst how many at once (default: the rate rounded
	// up); 0 (or less): no limit.
	MaxBuildFiles      int
	MaxBuildFilesBytes int64
	MaxPendingBuilds   int
	UploadRate         float64
	UploadBurst        int
	// MaxBuildVCPU and MaxBuildMemoryMiB bound what a template built
	// through this API may ask for each of its sandboxes (0: the bounds
	// of a Template, 64 vCPU and 256 GiB).
	MaxBuildVCPU      int32
	MaxBuildMemoryMiB int32
	// OperationRate is how many snapshots, pauses, resumes and template
	// builds a team may ask for a second on average, OperationBurst how
	// many at once (default: the rate rounded up); 0 (or less): no limit.
	OperationRate  float64
	OperationBurst int
	// Egress is the platform's outbound policy the nodes enforce (the
	// chart's network values): a sandbox's allowOut inside its denials
	// is refused (zero: nothing is refused here; the nodes still hold).
	Egress node.Egress
	Log    *slog.Logger
}

func (c *Config) setDefaults() {
	defaults := Config{Namespace: "default", DefaultTemplate: "default", KeysSecret: "sandlot-api-keys",
		EnvdVersion: DefaultEnvdVersion, ClientID: "sandlot", CreateTimeout: 2 * time.Minute,
		PauseTimeout: 2 * time.Minute, SnapshotTimeout: 5 * time.Minute, MaxBodyBytes: 1 << 20, Log: slog.Default()}
	set := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	set(&c.Namespace, defaults.Namespace)
	set(&c.DefaultTemplate, defaults.DefaultTemplate)
	set(&c.KeysSecret, defaults.KeysSecret)
	set(&c.EnvdVersion, defaults.EnvdVersion)
	set(&c.ClientID, defaults.ClientID)
	for _, d := range []struct{ v, d *time.Duration }{{&c.CreateTimeout, &defaults.CreateTimeout},
		{&c.PauseTimeout, &defaults.PauseTimeout}, {&c.SnapshotTimeout, &defaults.SnapshotTimeout}} {
		if *d.v <= 0 {
			*d.v = *d.d
		}
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = defaults.MaxBodyBytes
	}
	if c.CreateRate > 0 && c.CreateBurst < 1 {
		c.CreateBurst = max(1, int(math.Ceil(c.CreateRate)))
	}
	if c.OperationRate > 0 && c.OperationBurst < 1 {
		c.OperationBurst = max(1, int(math.Ceil(c.OperationRate)))
	}
	c.setBuildFilesDefaults()
	if c.Log == nil {
		c.Log = defaults.Log
	}
}

// Server is the E2B API and sandbox proxy.
type Server struct {
	cfg     Config
	kube    *Kube
	proxy   *proxy
	mux     *http.ServeMux
	creates *createLimiter // nil: creates are not limited
	uploads *createLimiter // by team; nil: uploads are not limited
	// operations: by team, snapshots, pauses, resumes and builds; nil:
	// not limited.
	operations *createLimiter
	locks      teamLocks  // buildquota.go
	rereads    keyRereads // apikeys.go
	teamSeries teamSeries // teammetrics.go
	// volumeContent serves /volumecontent/ (volumecontent.go).
	volumeContent http.Handler
	now           func() time.Time
}

// New makes a Server over kube (see NewKube).
func New(cfg Config, kube *Kube) *Server {
	cfg.setDefaults()
	s := &Server{cfg: cfg, kube: kube, now: time.Now, teamSeries: teamSeries{byNS: map[string][]teamSample{}}}
	if cfg.CreateRate > 0 {
		s.creates = newCreateLimiter(cfg.CreateRate, cfg.CreateBurst, time.Now)
	}
	if cfg.OperationRate > 0 {
		s.operations = newCreateLimiter(cfg.OperationRate, cfg.OperationBurst, time.Now)
	}
	if cfg.UploadRate > 0 {
		s.uploads = newCreateLimiter(cfg.UploadRate, cfg.UploadBurst, time.Now)
	}
	s.proxy = newProxy(s)
	if kube != nil && kube.sandboxes != nil {
		// Fails only for an informer already stopped: its server is done.
		if _, err := kube.sandboxes.AddEventHandler(s.proxy.streams.handler()); err != nil {
			cfg.Log.Error("the proxy will not cut the streams of sandboxes that move", "err", err)
		}
	}
	s.mux = s.routes()
	s.volumeContent = newVolumeContentHandler(s)
	return s
}

// endpoint handles one API route: a status and a JSON body (none when
// nil), or an error.
type endpoint func(w http.ResponseWriter, r *http.Request) (int, any, *apiError)

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	paths := map[string]bool{}
	handle := func(method, path string, e endpoint) {
		mux.HandleFunc(method+" "+path, s.serve(e))
		if !paths[path] { // any other method: a JSON 405
			paths[path] = true
			mux.HandleFunc(path, s.serve(func(http.ResponseWriter, *http.Request) (int, any, *apiError) {
				return 0, nil, errorf(http.StatusMethodNotAllowed, "method not allowed on %s", path)
			}))
		}
	}
	handle("POST", "/sandboxes", s.createSandbox)
	handle("POST", "/v2/sandboxes", s.createSandbox)
	handle("GET", "/sandboxes", s.listSandboxesV1)
	handle("GET", "/v2/sandboxes", s.listSandboxes)
	handle("GET", "/sandboxes/{id}", s.getSandbox)
	handle("DELETE", "/sandboxes/{id}", s.killSandbox)
	handle("POST", "/sandboxes/{id}/timeout", s.setTimeout)
	handle("POST", "/sandboxes/{id}/refreshes", s.refresh)
	handle("POST", "/sandboxes/{id}/pause", s.pause)
	handle("POST", "/sandboxes/{id}/resume", s.resume)
	handle("POST", "/sandboxes/{id}/connect", s.connect)
	handle("POST", "/v2/sandboxes/{id}/connect", s.connect)
	handle("POST", "/sandboxes/{id}/snapshots", s.createSnapshot)
	handle("POST", "/sandboxes/{id}/fork", s.fork)
	handle("POST", "/sandboxes/{id}/rollback", s.rollback)
	handle("GET", "/sandboxes/{id}/metrics", s.metrics)
	// Its other methods are /sandboxes/{id}'s 405 (a fallback of its own
	// would conflict with GET /sandboxes/{id}).
	mux.HandleFunc("GET /sandboxes/metrics", s.serve(s.sandboxesMetrics))
	handle("GET", "/sandboxes/{id}/logs", s.logsV1)
	handle("GET", "/v2/sandboxes/{id}/logs", s.logs)
	handle("PUT", "/sandboxes/{id}/network", s.updateNetwork)
	handle("GET", "/snapshots", s.listSnapshots)
	s.teamRoutes(handle)
	handle("GET", "/templates", s.listTemplates)
	handle("GET", "/v2/templates", s.listTemplatesV2)
	handle("GET", "/templates/{id}", s.getTemplate)
	handle("DELETE", "/templates/{id}", s.deleteTemplate)
	handle("POST", "/v3/templates", s.requestBuild)
	handle("GET", "/templates/{id}/files/{hash}", s.fileUploadLink)
	handle("POST", "/v2/templates/{id}/builds/{buildID}", s.startBuild)
	handle("GET", "/templates/{id}/builds/{buildID}/status", s.buildStatus)
	handle("GET", "/templates/{id}/builds/{buildID}/logs", s.buildLogs)
	handle("GET", "/templates/{id}/{sub}", s.templateSubroute) // aliases/{alias} and {id}/tags
	// No 405 for /templates/tags: its other methods are /templates/{id}'s.
	mux.HandleFunc("POST /templates/tags", s.serve(s.assignTags))
	mux.HandleFunc("DELETE /templates/tags", s.serve(s.deleteTags))
	for _, p := range []string{"/templates", "/v2/templates", "/templates/{id}"} {
		handle("POST", p, s.templateBuild)
	}
	handle("PATCH", "/templates/{id}", s.updateTemplate)
	handle("PATCH", "/v2/templates/{id}", s.updateTemplate)
	s.unserved(mux)
	return mux
}

// teamRoutes are a team's own: its credentials, itself, its metrics.
func (s *Server) teamRoutes(handle func(method, path string, e endpoint)) {
	handle("GET", "/api-keys", s.listAPIKeys)
	handle("POST", "/api-keys", s.createAPIKey)
	handle("PATCH", "/api-keys/{apiKeyID}", s.changeAPIKey)
	handle("DELETE", "/api-keys/{apiKeyID}", s.changeAPIKey)
	handle("POST", "/access-tokens", s.createAccessToken)
	handle("DELETE", "/access-tokens/{accessTokenID}", s.deleteAccessToken)
	handle("GET", "/teams", s.teams)
	handle("GET", "/teams/{teamID}/metrics", s.teamMetrics)
	handle("GET", "/teams/{teamID}/metrics/max", s.teamMetricMax)
	handle("GET", "/volumes", s.listVolumes)
	handle("POST", "/volumes", s.createVolume)
	handle("GET", "/volumes/{volumeID}", s.getVolume)
	handle("DELETE", "/volumes/{volumeID}", s.deleteVolume)
	handle("GET", "/secrets", s.listSecrets)
	handle("POST", "/secrets", s.createSecret)
	handle("GET", "/secrets/{secretID}", s.getSecret)
	handle("POST", "/secrets/{secretID}", s.updateSecret)
	handle("DELETE", "/secrets/{secretID}", s.deleteSecret)
}

// unserved routes what no handler above serves: the legacy template
// builds (501, naming the SDK's build) and the rest (404, no route).
// The tags routes are named above (templatetags.go), so that the template
// routes do not take "tags" for a template ID.
func (s *Server) unserved(mux *http.ServeMux) {
	noRoute := func(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
		return 0, nil, errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	mux.HandleFunc("/", s.serve(func(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
		if strings.Contains(r.URL.Path, "/templates/") && !strings.HasSuffix(r.URL.Path, "/tags") {
			return s.templateBuild(w, r)
		}
		return noRoute(w, r)
	}))
}

// ServeHTTP routes sandbox traffic (by E2b-Sandbox-Id header or host
// name) to the proxy and everything else to the API, which needs a key.
// Only API calls get deadlines: proxied streams run as long as they last.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if t, ok := s.proxyTarget(r); ok {
		s.proxy.serve(w, r, t)
		return
	}
	if r.URL.Path == "/health" {
		w.WriteHeader(http.StatusOK)
		return
	}
	if strings.HasPrefix(r.URL.Path, volumeContentPrefix) {
		// Transfers of up to 1 GiB: no REST call's deadlines (the SDKs
		// allow them an hour; a client that stalls holds one connection).
		clearDeadlines(w)
		s.volumeContent.ServeHTTP(w, r) // the volume's token is the key
		return
	}
	if strings.HasPrefix(r.URL.Path, uploadPrefix) {
		s.apiDeadlines(w, r)
		s.serveUpload(w, r) // signed links: the signature is the key
		return
	}
	s.apiDeadlines(w, r)
	ctx, err := s.authorizeRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	r = r.WithContext(ctx)
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	s.mux.ServeHTTP(w, r)
}

func (s *Server) serve(e endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code, body, err := e(w, r)
		if err != nil {
			code = err.Code
			s.cfg.Log.Info("request failed", "method", r.Method, "path", r.URL.Path, "code", err.Code, "error", err.Message,
				"took", time.Since(start))
			writeError(w, err)
		} else {
			writeJSON(w, code, body)
		}
		observeRequest(r, code, time.Since(start))
	}
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	if body == nil {
		w.WriteHeader(code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func writeError(w http.ResponseWriter, err *apiError) { writeJSON(w, err.Code, err) }

// authorize checks X-API-KEY against every team's keys and returns the
// key's team (namespace).
func (s *Server) authorize(r *http.Request) (string, *apiError) {
	key := r.Header.Get("X-API-KEY")
	if key == "" {
		return "", errorf(http.StatusUnauthorized, "missing X-API-KEY header")
	}
	return s.keyTeam(r.Context(), key)
}

// NewAPIKey draws a key in E2B's format: e2b_ and 40 hex digits.
func NewAPIKey() (string, error) {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("draw an API key: %w", err)
	}
	return "e2b_" + hex.EncodeToString(b), nil
}

// templateBuild answers E2B's legacy template routes (the CLI's v1/v2
// Dockerfile builds, PATCH): the SDK's Template().build() is served.
func (s *Server) templateBuild(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	return 0, nil, errorf(http.StatusNotImplemented, "%s %s is not served: build templates with the SDK's Template().build() "+
		"(POST /v3/templates, then /v2/templates/{id}/builds/{buildID}), or create a Template (kind: Template) in namespace %s",
		r.Method, r.URL.Path, teamOf(r.Context()))
}

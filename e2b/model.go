package e2b

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/sandlot-dev/sandlot/api/mcp"
	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// The wire types: E2B's OpenAPI schemas (../shared/reference/e2b), only
// the fields sandlot fills or reads.

// newSandbox is the body of POST /sandboxes and /v2/sandboxes.
type newSandbox struct {
	// proxyPassword is network.egressProxy.password, kept out of the spec.
	proxyPassword   string
	TemplateID      string                  `json:"templateID"`
	Timeout         *int64                  `json:"timeout,omitempty"`
	AutoPause       *bool                   `json:"autoPause,omitempty"`
	AutoPauseMemory *bool                   `json:"autoPauseMemory,omitempty"`
	AutoResume      *autoResume             `json:"autoResume,omitempty"`
	Metadata        map[string]string       `json:"metadata,omitempty"`
	EnvVars         map[string]string       `json:"envVars,omitempty"`
	AllowInternet   *bool                   `json:"allow_internet_access,omitempty"`
	Network         *networkConfig          `json:"network,omitempty"`
	Mcp             json.RawMessage         `json:"mcp,omitempty"`
	VolumeMounts    []sandlotv1.VolumeMount `json:"volumeMounts,omitempty"`
}

type autoResume struct {
	Enabled bool `json:"enabled"`
}

// timeoutBody is the body of /timeout and /connect ({timeout}), /refreshes
// ({duration}) and /fork ({timeout, count}).
type timeoutBody struct {
	Timeout  *int64 `json:"timeout,omitempty"`
	Duration *int64 `json:"duration,omitempty"`
	Count    *int64 `json:"count,omitempty"`
}

// connectBody is /v2/sandboxes/{id}/connect's: memory false resumes a
// paused sandbox by a cold boot on its disk (the SDKs' reboot-resume).
type connectBody struct {
	Timeout *int64 `json:"timeout,omitempty"`
	Memory  *bool  `json:"memory,omitempty"`
}

// pauseBody is /sandboxes/{id}/pause's: memory false is a filesystem-only
// pause (spec.resumeBy Boot); requireHealthyGuest refuses to pause a sandbox whose envd does
// not answer.
type pauseBody struct {
	Memory              *bool `json:"memory,omitempty"`
	RequireHealthyGuest *bool `json:"requireHealthyGuest,omitempty"`
}

type snapshotBody struct {
	Name string `json:"name,omitempty"`
}

type rollbackBody struct {
	SnapshotID string `json:"snapshotID"`
}

// sandboxJSON is E2B's Sandbox (create, connect, fork results).
type sandboxJSON struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	// TrafficAccessToken opens the sandbox's ports when its traffic is
	// private (network.allowPublicTraffic false).
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
	Domain             string `json:"domain,omitempty"`
}

// sandboxDetail is E2B's SandboxDetail and ListedSandbox.
type sandboxDetail struct {
	TemplateID      string            `json:"templateID"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       string            `json:"startedAt"`
	EndAt           string            `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          string            `json:"domain,omitempty"`
	CPUCount        int32             `json:"cpuCount"`
	MemoryMB        int32             `json:"memoryMB"`
	DiskSizeMB      int32             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	Lifecycle       *lifecycleJSON    `json:"lifecycle,omitempty"`
	// Network and AllowInternetAccess are SandboxDetail's (GET
	// /sandboxes/{id}), not ListedSandbox's.
	Network             *networkJSON            `json:"network,omitempty"`
	AllowInternetAccess *bool                   `json:"allowInternetAccess,omitempty"`
	VolumeMounts        []sandlotv1.VolumeMount `json:"volumeMounts"`
}

type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

type forkResult struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *apiError    `json:"error,omitempty"`
}

type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

type templateJSON struct {
	TemplateID    string   `json:"templateID"`
	BuildID       string   `json:"buildID"`
	CPUCount      int32    `json:"cpuCount"`
	MemoryMB      int32    `json:"memoryMB"`
	DiskSizeMB    int32    `json:"diskSizeMB"`
	Public        bool     `json:"public"`
	Aliases       []string `json:"aliases"`
	Names         []string `json:"names"`
	CreatedAt     string   `json:"createdAt"`
	UpdatedAt     string   `json:"updatedAt"`
	CreatedBy     *string  `json:"createdBy"`
	LastSpawnedAt *string  `json:"lastSpawnedAt"`
	SpawnCount    int64    `json:"spawnCount"`
	BuildCount    int32    `json:"buildCount"`
	EnvdVersion   string   `json:"envdVersion"`
	BuildStatus   string   `json:"buildStatus"`
}

type metricJSON struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int32   `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// apiError is E2B's Error: code equals the HTTP status.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Message }

func errorf(code int, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Bounds of what a request may ask for.
const (
	maxTimeoutSeconds = 30 * 24 * 3600 // the Sandbox CRD's bound
	maxMetadata       = 64
	maxMetadataKey    = 63
	maxMetadataValue  = 1024
	maxEnvVars        = 256
	maxEnvValue       = 32 * 1024
	maxForkCount      = 100
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// decodeBody decodes a JSON body into v. An empty body is an empty object
// (the SDK sends none on some POSTs). Fields sandlot does not know are
// ignored, as E2B's API does.
func decodeBody(r *http.Request, v any) *apiError {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", tooBig.Limit)
		}
		return errorf(http.StatusBadRequest, "read request body: %v", err)
	}
	return decodeJSON(data, v)
}

func decodeJSON(data []byte, v any) *apiError {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	// A field sandlot does not know would be ignored: refused by name.
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, "request body: %s", describeJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF { // dec.More() misses a stray '}' or ']'
		return errorf(http.StatusBadRequest, "request body: data after the JSON value")
	}
	return nil
}

// describeJSONError names the field a type error is about, or the field
// sandlot does not support.
func describeJSONError(err error) string {
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Sprintf("field %s is not supported by sandlot", name)
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fmt.Sprintf("field %q: want %s, got %s", typeErr.Field, typeErr.Type, typeErr.Value)
	}
	return err.Error()
}

// validate checks a create request; the error names the field.
func (n *newSandbox) validate() *apiError {
	if strings.TrimSpace(n.TemplateID) == "" {
		return errorf(http.StatusBadRequest, "field \"templateID\" is required")
	}
	if n.Timeout != nil && (*n.Timeout < 0 || *n.Timeout > maxTimeoutSeconds) {
		return errorf(http.StatusBadRequest, "field \"timeout\": %d is outside 0..%d seconds", *n.Timeout, maxTimeoutSeconds)
	}
	if err := validateMetadata(n.Metadata); err != nil {
		return err
	}
	if len(n.EnvVars) > maxEnvVars {
		return errorf(http.StatusBadRequest, "field \"envVars\": %d variables, at most %d", len(n.EnvVars), maxEnvVars)
	}
	for k, v := range n.EnvVars {
		if !envName.MatchString(k) {
			return errorf(http.StatusBadRequest, "field \"envVars\": %q is not a valid variable name", k)
		}
		if len(v) > maxEnvValue {
			return errorf(http.StatusBadRequest, "field \"envVars\": the value of %s is longer than %d bytes", k, maxEnvValue)
		}
	}
	if n.AutoResume != nil && n.AutoResume.Enabled && (n.AutoPause == nil || !*n.AutoPause) {
		return errorf(http.StatusBadRequest, "field \"autoResume\": needs autoPause (a sandbox resumes only from a pause)")
	}
	if n.AutoPauseMemory != nil && !*n.AutoPauseMemory && (n.AutoPause == nil || !*n.AutoPause) {
		return errorf(http.StatusBadRequest, "field \"autoPauseMemory\": false needs autoPause (it says how the timeout pauses)")
	}
	if err := validateVolumeMounts(n.VolumeMounts); err != nil {
		return err
	}
	if len(n.Mcp) > 0 && string(n.Mcp) != "null" {
		// The SDK starts the gateway (mcp-gateway in the template) once the
		// sandbox runs; what it cannot run is refused before that.
		if _, err := mcp.Parse(n.Mcp); err != nil {
			return errorf(http.StatusBadRequest, "field \"mcp\": %v", err)
		}
	}
	_, _, err := n.network()
	return err
}

func validateMetadata(m map[string]string) *apiError {
	if len(m) > maxMetadata {
		return errorf(http.StatusBadRequest, "field \"metadata\": %d entries, at most %d", len(m), maxMetadata)
	}
	for k, v := range m {
		if k == "" || len(k) > maxMetadataKey {
			return errorf(http.StatusBadRequest, "field \"metadata\": key %q must be 1..%d bytes", k, maxMetadataKey)
		}
		if len(v) > maxMetadataValue {
			return errorf(http.StatusBadRequest, "field \"metadata\": the value of %q is longer than %d bytes", k, maxMetadataValue)
		}
	}
	return nil
}

// seconds validates an optional duration in seconds of a body field.
func seconds(field string, v *int64, min int64) (int64, *apiError) {
	if v == nil {
		return 0, errorf(http.StatusBadRequest, "field %q is required", field)
	}
	if *v < min || *v > maxTimeoutSeconds {
		return 0, errorf(http.StatusBadRequest, "field %q: %d is outside %d..%d seconds", field, *v, min, maxTimeoutSeconds)
	}
	return *v, nil
}

// parseMetadataQuery parses the list filter `metadata`: the SDK
// URI-encodes each key and value, joins them as a query string, and sends
// that as one parameter.
func parseMetadataQuery(q string) (map[string]string, *apiError) {
	if q == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(q)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "query \"metadata\": %v", err)
	}
	out := map[string]string{}
	for k, vs := range vals {
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err := errors.Join(err1, err2); err != nil || key == "" {
			return nil, errorf(http.StatusBadRequest, "query \"metadata\": %q is not key=value", k)
		}
		out[key] = val
	}
	return out, nil
}

// Package stageapi is how a shim asks its node's agent for the data a pod
// restores from: the agent opens it in the store (downloading it and what
// it depends on when another node wrote it) and answers with the local
// directory; the shim releases it once the VM is restored. It is HTTP
// with JSON bodies on a unix socket, and imports nothing of Kubernetes.
package stageapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// Paths of the two calls.
const (
	PathStage   = "/v1/stage"
	PathRelease = "/v1/release"
)

// StageRequest names the data: the kind and UID of a Snapshot or a
// PausedSandbox (the pod's restore annotations).
type StageRequest struct {
	Kind string `json:"kind"`
	UID  string `json:"uid"`
	// The pod the restore is for (its CRI sandbox's metadata): the agent
	// stages data only for a pod the controller pointed at it.
	PodNamespace string `json:"podNamespace,omitempty"`
	PodName      string `json:"podName,omitempty"`
	PodUID       string `json:"podUID,omitempty"`
}

// StageResponse is the data's directory on this node; Token releases it.
type StageResponse struct {
	Dir   string `json:"dir"`
	Token string `json:"token"`
	// StoreRoot is the store's root on this node, Dir and the data it
	// depends on under it: the root a restore of Dir confines the
	// manifest's files to (vm.Roots.Store). Empty from an older agent.
	StoreRoot string `json:"storeRoot,omitempty"`
}

// ReleaseRequest ends a stage.
type ReleaseRequest struct {
	Token string `json:"token"`
}

// Error is a failed call: the HTTP status says which kind of failure
// (404 unknown data, 409 not restorable on this node yet, 422 data
// refused, 400 bad request); Reason, when set, says why data was refused.
type Error struct {
	Status  int    `json:"-"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

// Reasons data is refused (HTTP 422): retrying does not help until the
// data in the store is fixed or deleted.
const (
	// ReasonIntegrityCheckFailed: data from the shared store is not what
	// a node of the cluster wrote (a bad or missing signature, a file
	// whose sha256 differs from the signed one).
	ReasonIntegrityCheckFailed = "IntegrityCheckFailed"
	// ReasonManifestRejected: the manifest names a file outside the
	// store (or a protocol, a device) that no restore may open.
	ReasonManifestRejected = "ManifestRejected"
)

func (e *Error) Error() string {
	if e.Reason != "" && !strings.Contains(e.Message, e.Reason) {
		return fmt.Sprintf("node agent: %s: %s (HTTP %d)", e.Reason, e.Message, e.Status)
	}
	return fmt.Sprintf("node agent: %s (HTTP %d)", e.Message, e.Status)
}

// ErrNotFound, ErrNotReady, ErrIntegrityCheckFailed and ErrManifestRejected
// classify an *Error with errors.Is.
var (
	ErrNotFound             = errors.New("data not found on this node or in the store")
	ErrNotReady             = errors.New("data not restorable on this node yet")
	ErrIntegrityCheckFailed = errors.New(ReasonIntegrityCheckFailed)
	ErrManifestRejected     = errors.New(ReasonManifestRejected)
	// ErrRefused is a request the agent will not serve: the pod does not
	// belong to a Sandbox the controller pointed at that data.
	ErrRefused = errors.New("stage request refused")
	// ErrStopping is an agent that is shutting down (a DaemonSet pod being
	// replaced): its successor answers the same request.
	ErrStopping = errors.New("node agent stopping")
)

func (e *Error) Is(target error) bool {
	return (target == ErrNotFound && e.Status == http.StatusNotFound) ||
		(target == ErrNotReady && e.Status == http.StatusConflict) ||
		(target == ErrIntegrityCheckFailed && e.Reason == ReasonIntegrityCheckFailed) ||
		(target == ErrManifestRejected && e.Reason == ReasonManifestRejected) ||
		(target == ErrRefused && e.Status == http.StatusForbidden) ||
		(target == ErrStopping && e.Status == http.StatusServiceUnavailable)
}

// Key is the store key of a restorable kind's object: the agent keeps
// Snapshots under "snapshots/<uid>" and pause packages under
// "paused/<uid>".
func Key(kind, uid string) (string, error) {
	prefix, ok := map[string]string{"Snapshot": "snapshots", "PausedSandbox": "paused"}[kind]
	if !ok || uid == "" {
		return "", fmt.Errorf("restore source %s/%q: want kind Snapshot or PausedSandbox and a UID", kind, uid)
	}
	return prefix + "/" + uid, nil
}

// Client calls the agent's socket.
type Client struct{ http *http.Client }

// NewClient talks to the agent listening on socket.
func NewClient(socket string) *Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}
	return &Client{http: &http.Client{Transport: &http.Transport{DialContext: dial}}}
}

// Stage opens the data on this node; downloads can take a while, so ctx
// bounds it.
func (c *Client) Stage(ctx context.Context, r StageRequest) (StageResponse, error) {
	var out StageResponse
	return out, c.call(ctx, PathStage, r, &out)
}

// Release ends a stage (a token the agent no longer knows is fine).
func (c *Client) Release(ctx context.Context, token string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.call(ctx, PathRelease, ReleaseRequest{Token: token}, nil)
}

func (c *Client) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://agent"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("node agent %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e := &Error{Status: resp.StatusCode}
		if json.NewDecoder(resp.Body).Decode(e) != nil || e.Message == "" {
			e.Message = resp.Status
		}
		return e
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

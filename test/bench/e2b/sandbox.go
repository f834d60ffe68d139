package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/test/bench/bare"
)

// commandTimeout bounds a first command: the SDK's default timeoutMs.
const commandTimeout = 60 * time.Second

// createReply is a create's answer.
type createReply struct {
	id, token string
	sent      time.Time
	toCreated time.Duration
}

// started is one start as an SDK user sees it: the create's 201, then
// the first command answered; an error for each that failed.
type started struct {
	id, token             string
	toCreated, toCommand  time.Duration // from the create's request
	createErr, commandErr error
	// second and direct (c = 1 only: where the first command's time goes)
	// are a second command through the proxy and one sent straight to the
	// pod's envd, each timed alone.
	second, direct time.Duration
}

// start is Sandbox.create() and then sandbox.commands.run('true').
func (b *bench) start() started {
	c, err := b.create()
	if err != nil {
		return started{createErr: err}
	}
	s := started{id: c.id, token: c.token, toCreated: c.toCreated}
	if err := b.firstCommand(c.id, c.token); err != nil {
		s.commandErr = fmt.Errorf("first command in %s: %w", c.id, err)
		return s
	}
	s.toCommand = time.Since(c.sent)
	return s
}

// create is POST /v2/sandboxes with the SDK's default template ID.
func (b *bench) create() (createReply, error) {
	start := time.Now()
	code, body, err := b.call(http.MethodPost, "/v2/sandboxes", `{"templateID":"base","timeout":3600}`)
	answered := time.Now()
	if err != nil {
		return createReply{}, fmt.Errorf("create: %w", err)
	}
	if code != http.StatusCreated {
		return createReply{}, fmt.Errorf("create: %d %s", code, body)
	}
	var s struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if err := json.Unmarshal(body, &s); err != nil || s.SandboxID == "" {
		return createReply{}, fmt.Errorf("create: no sandboxID in %s", body)
	}
	if b.hops != nil {
		b.hops.request(s.SandboxID, start, answered)
	}
	return createReply{id: s.SandboxID, token: s.EnvdAccessToken, sent: start, toCreated: answered.Sub(start)}, nil
}

// firstCommand is the SDK's commands.run in its sandbox-url mode:
// process.Process/Start sent to sandlot-api's URL, routed by the E2B
// headers to the sandbox's envd, with the token the create gave (the SDK
// sends X-Access-Token only when the create returned one).
func (b *bench) firstCommand(id, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", id)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(sandlotv1.EnvdPort))
	if token != "" {
		h.Set("X-Access-Token", token)
	}
	return bare.Command(ctx, httpClient, b.api, h)
}

// breakdown times, after the first command, a second one through the
// proxy (the guest has now run a command: what is left is the proxy,
// envd and the process) and one sent straight to the pod's envd on its
// pod IP (no proxy): set on s, zero when either fails.
func (b *bench) breakdown(s *started) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	began := time.Now()
	if err := b.firstCommand(s.id, s.token); err != nil {
		b.t.Logf("second command in %s: %v", s.id, err)
		return
	}
	second := time.Since(began)
	ip, err := b.podIP(ctx, s.id)
	if err != nil {
		b.t.Logf("pod IP of %s: %v", s.id, err)
		return
	}
	h := http.Header{}
	h.Set("X-Access-Token", s.token)
	began = time.Now()
	if err := bare.Command(ctx, httpClient, "http://"+ip+":"+strconv.Itoa(sandlotv1.EnvdPort), h); err != nil {
		b.t.Logf("command straight to %s's envd: %v", s.id, err)
		return
	}
	s.second, s.direct = second, time.Since(began)
}

// podIP is the pod IP of the sandbox whose E2B ID is id.
func (b *bench) podIP(ctx context.Context, id string) (string, error) {
	var list sandlotv1.SandboxList
	if err := b.k.List(ctx, &list, client.InNamespace("default")); err != nil {
		return "", err
	}
	for _, sbx := range list.Items {
		if sbx.Status.SandboxID == id && sbx.Status.PodIP != "" {
			return sbx.Status.PodIP, nil
		}
	}
	return "", fmt.Errorf("no sandbox %s with a pod IP", id)
}

// kill is DELETE /sandboxes/{id}.
func (b *bench) kill(id string) (time.Duration, error) {
	start := time.Now()
	code, body, err := b.call(http.MethodDelete, "/sandboxes/"+id, "")
	if err == nil && code != http.StatusNoContent {
		err = fmt.Errorf("delete %s: %d %s", id, code, body)
	}
	return time.Since(start), err
}

var httpClient = &http.Client{Timeout: waitTimeout, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 100}}

func (b *bench) call(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, b.api+path, bytes.NewBufferString(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-API-KEY", b.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

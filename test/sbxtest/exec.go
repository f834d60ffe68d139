package sbxtest

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
)

// EnvdRun runs a command in a sandbox through its envd API on the pod IP
// (Exec with a 30 s bound) and returns its stdout, failing t when it
// cannot run or exits non-zero.
func EnvdRun(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := Exec(ctx, k, sbx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// EnvdExit is EnvdRun for a command that may fail: it returns how the
// command ended, whatever its exit code, failing t only when it cannot
// run. The caller asserts the code.
func EnvdExit(t *testing.T, k client.Client, sbx *sandlotv1.Sandbox, cmd string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := ExecExit(ctx, k, sbx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Result is how a command in a sandbox ended.
type Result struct {
	Stdout, Stderr string
	Code           int32  // the exit code; -1 when a signal ended it
	Status         string // envd's account of the end: "exit status 3", "signal: killed"
}

// ExitError is a command that ran in a sandbox and exited non-zero.
type ExitError struct {
	Sandbox, Cmd string
	Result
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("in sandbox %s, %q exited %d (%s); stderr: %q; stdout: %q",
		e.Sandbox, e.Cmd, e.Code, e.Status, tail(e.Stderr), tail(e.Stdout))
}

// tail is the end of a command's output, enough to say why it failed.
func tail(s string) string {
	const keep = 2000
	if len(s) <= keep {
		return s
	}
	return "..." + s[len(s)-keep:]
}

// Exec runs a shell command in a sandbox through its envd API on the pod
// IP, with the sandbox's token, and returns its stdout; a command that
// exits non-zero is an *ExitError with its code and stderr.
func Exec(ctx context.Context, k client.Client, sbx *sandlotv1.Sandbox, cmd string) (string, error) {
	r, err := ExecExit(ctx, k, sbx, cmd)
	if err == nil {
		err = exitError(sbx.Name, cmd, r)
	}
	return r.Stdout, err
}

// exitError is nil for a command that exited 0, else an *ExitError.
func exitError(sandbox, cmd string, r Result) error {
	if r.Code != 0 {
		return &ExitError{Sandbox: sandbox, Cmd: cmd, Result: r}
	}
	return nil
}

// ExecExit is Exec for a command that may fail: a non-zero exit is in the
// Result, the error only says the command could not run or its end was
// not seen.
func ExecExit(ctx context.Context, k client.Client, sbx *sandlotv1.Sandbox, cmd string) (Result, error) {
	var secret corev1.Secret
	if err := k.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: sandlotv1.TokenSecretName(sbx.Name)}, &secret); err != nil {
		return Result{}, fmt.Errorf("token of %s: %w", sbx.Name, err)
	}
	envd := "http://" + sbx.Status.PodIP + ":49983"
	return execAt(ctx, envd, string(secret.Data[sandlotv1.TokenSecretKey]), sbx.Name, cmd)
}

// execAt runs cmd through the envd at url with token: ExecExit on an
// address of its own.
func execAt(ctx context.Context, url, token, sandbox, cmd string) (Result, error) {
	// A connection per call: one kept alive across a rollback would carry
	// the guest's TCP state from before it and hang.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	pc := processpbconnect.NewProcessClient(hc, url, connect.WithProtoJSON())
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}})
	req.Header().Set("X-Access-Token", token)
	// As root: the platform's suites read and write anywhere in the guest
	// (envd's default is E2B's unprivileged "user" in sandlot's images).
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	stream, err := pc.Start(ctx, req)
	if err != nil {
		return Result{}, fmt.Errorf("envd of %s at %s: %w", sandbox, url, err)
	}
	defer stream.Close()
	var out, errOut strings.Builder
	var end *processpb.ProcessEvent_EndEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		errOut.Write(ev.GetData().GetStderr())
		if e := ev.GetEnd(); e != nil {
			end = e
		}
	}
	r := Result{Stdout: out.String(), Stderr: errOut.String()}
	if err := stream.Err(); err != nil && err != io.EOF {
		return r, fmt.Errorf("in sandbox %s, %q: %w (stderr %q)", sandbox, cmd, err, tail(r.Stderr))
	}
	if end == nil {
		return r, fmt.Errorf("in sandbox %s, %q: the stream ended without the process's end (stderr %q)", sandbox, cmd, tail(r.Stderr))
	}
	r.Code, r.Status = end.GetExitCode(), end.GetStatus()
	return r, nil
}

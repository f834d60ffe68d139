package sbxtest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/guest/envd/process"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/guest/sandboxfs"
)

// envd serves the guest's real process API on the host (commands run as
// this process's user, in a throwaway root).
func envd(t *testing.T) string {
	t.Helper()
	root, err := sandboxfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	svc := process.New(process.Config{Root: root, Identity: &identity.Store{}})
	path, h := processpbconnect.NewProcessHandler(svc)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { svc.Close(); srv.Close() })
	return srv.URL
}

// TestExecExitCodes: what a command ends with reaches the caller — its
// stdout and stderr, its exit code, a signal's end — and Exec makes a
// non-zero exit an error naming the command, the code and its stderr.
func TestExecExitCodes(t *testing.T) {
	url := envd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		cmd  string
		want Result
	}{
		{"echo out; echo err >&2", Result{Stdout: "out\n", Stderr: "err\n", Code: 0, Status: "exit status 0"}},
		{"echo partial; echo why >&2; exit 3", Result{Stdout: "partial\n", Stderr: "why\n", Code: 3, Status: "exit status 3"}},
		{"kill -9 $$", Result{Code: -1, Status: "signal: killed"}},
	} {
		got, err := execAt(ctx, url, "token", "sbx", tc.cmd)
		if err != nil || got != tc.want {
			t.Errorf("execAt(%q) = %+v, %v; want %+v", tc.cmd, got, err, tc.want)
		}
	}
}

// TestExitError: Exec's error for a non-zero exit names the sandbox, the
// command, the code and its stderr; an exit 0 is no error; an envd that
// cannot be reached is an error of its own, not an exit.
func TestExitError(t *testing.T) {
	url := envd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const cmd = "echo partial; echo why >&2; exit 3"
	r, err := execAt(ctx, url, "token", "sbx", cmd)
	if err != nil {
		t.Fatal(err)
	}
	exit := exitError("sbx", cmd, r)
	var e *ExitError
	if !errors.As(exit, &e) || e.Code != 3 || e.Stdout != "partial\n" {
		t.Fatalf("exitError = %#v, want an *ExitError of code 3", exit)
	}
	for _, want := range []string{"sandbox sbx", `"echo partial; echo why >&2; exit 3"`, "exited 3", `stderr: "why\n"`} {
		if !strings.Contains(exit.Error(), want) {
			t.Errorf("%q does not say %s", exit.Error(), want)
		}
	}
	if err := exitError("sbx", "true", Result{Status: "exit status 0"}); err != nil {
		t.Errorf("exitError of an exit 0 = %v", err)
	}
	_, err = execAt(ctx, "http://127.0.0.1:1", "token", "sbx", "true")
	if err == nil || errors.As(err, &e) || !strings.Contains(err.Error(), "sandbox sbx") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("execAt of an envd that is not there = %v, want an error naming the sandbox and the refusal", err)
	}
}

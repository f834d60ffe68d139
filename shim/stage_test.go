package shim

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
)

// TestStageWaitsForAgent: a restore asked while the node agent restarts
// (no socket yet) is answered once the agent listens; a request to an
// agent that answers an error is not retried.
func TestStageWaitsForAgent(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock")
	go func() {
		time.Sleep(time.Second) // the agent's pod comes back
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Error(err)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewEncoder(w).Encode(stageapi.StageResponse{Dir: "/data/x", Token: "t"})
		})}
		t.Cleanup(func() { srv.Close() })
		_ = srv.Serve(l)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	resp, err := stageWaitingForAgent(ctx, stageapi.NewClient(socket), stageapi.StageRequest{Kind: "Snapshot", UID: "u"})
	if err != nil || resp.Dir != "/data/x" {
		t.Fatalf("stage = %+v, %v", resp, err)
	}
	if time.Since(began) < time.Second {
		t.Fatalf("answered in %v, before the agent listened", time.Since(began))
	}
}

// TestStageRetriesAgentKilledMidRequest: an agent that dies while it
// stages (the connection closes before an answer, or it answers 503
// because its context ended) is asked again, and the restore goes on with
// its successor's answer.
func TestStageRetriesAgentKilledMidRequest(t *testing.T) {
	deaths := map[string]func(w http.ResponseWriter){
		"connection closed": func(w http.ResponseWriter) {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		},
		"stopping": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(stageapi.Error{Message: "check the stage request: context canceled"})
		},
	}
	for name, die := range deaths {
		t.Run(name, func(t *testing.T) {
			var asked atomic.Int32
			socket := agentAt(t, func(w http.ResponseWriter, r *http.Request) {
				if asked.Add(1) == 1 { // the first agent dies mid-request
					die(w)
					return
				}
				_ = json.NewEncoder(w).Encode(stageapi.StageResponse{Dir: "/data/y", Token: "t"})
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := stageWaitingForAgent(ctx, stageapi.NewClient(socket), stageapi.StageRequest{Kind: "Snapshot", UID: "u"})
			if err != nil || resp.Dir != "/data/y" || asked.Load() != 2 {
				t.Fatalf("stage = %+v, %v after %d requests; want the second agent's answer", resp, err, asked.Load())
			}
		})
	}
}

// TestStageDoesNotRetryAgentErrors: an agent's own failure (500) fails
// the restore at once.
func TestStageDoesNotRetryAgentErrors(t *testing.T) {
	var asked atomic.Int32
	socket := agentAt(t, func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(stageapi.Error{Message: "disk full"})
	})
	_, err := stageWaitingForAgent(context.Background(), stageapi.NewClient(socket), stageapi.StageRequest{Kind: "Snapshot", UID: "u"})
	if err == nil || asked.Load() != 1 {
		t.Fatalf("stage = %v after %d requests; want the 500 after one", err, asked.Load())
	}
}

// agentAt serves handler on a unix socket, as the node agent does.
func agentAt(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	t.Cleanup(func() { srv.Close() })
	go func() { _ = srv.Serve(l) }()
	return socket
}

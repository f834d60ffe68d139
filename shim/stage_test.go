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
// stages (the connection closes before an answer) is asked again, and the
// restore goes on with its successor's answer.
func TestStageRetriesAgentKilledMidRequest(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 { // the first agent dies mid-request
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		_ = json.NewEncoder(w).Encode(stageapi.StageResponse{Dir: "/data/y", Token: "t"})
	})}
	t.Cleanup(func() { srv.Close() })
	go func() { _ = srv.Serve(l) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := stageWaitingForAgent(ctx, stageapi.NewClient(socket), stageapi.StageRequest{Kind: "Snapshot", UID: "u"})
	if err != nil || resp.Dir != "/data/y" || asked.Load() != 2 {
		t.Fatalf("stage = %+v, %v after %d requests; want the second agent's answer", resp, err, asked.Load())
	}
}

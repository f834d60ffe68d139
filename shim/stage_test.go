package shim

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
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

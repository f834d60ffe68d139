package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandlot-dev/sandlot/api/node/stageapi"
)

// TestInternalErrorWhileStopping: a failure while the agent stops (the
// request's context, derived from the agent's, ended) is 503, which the
// shim's client reads as ErrStopping and asks the successor; any other
// failure stays a 500 the shim does not retry.
func TestInternalErrorWhileStopping(t *testing.T) {
	stopped, stop := context.WithCancel(context.Background())
	stop()
	for name, tc := range map[string]struct {
		ctx      context.Context
		stopping bool
	}{"stopping": {stopped, true}, "running": {context.Background(), false}} {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			r := httptest.NewRequestWithContext(tc.ctx, http.MethodPost, stageapi.PathStage, nil)
			internalError(rec, r, errors.New("get pod: context canceled"))
			e := &stageapi.Error{Status: rec.Code}
			if err := json.NewDecoder(rec.Body).Decode(e); err != nil {
				t.Fatal(err)
			}
			if errors.Is(e, stageapi.ErrStopping) != tc.stopping {
				t.Fatalf("HTTP %d %q: stopping = %v, want %v", rec.Code, e.Message, !tc.stopping, tc.stopping)
			}
		})
	}
}

package e2b

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCreateFailureReason(t *testing.T) {
	for _, tc := range []struct {
		stage createStage
		code  int
		want  string
	}{
		{createRequest, http.StatusBadRequest, "Invalid"},
		{createRequest, http.StatusRequestEntityTooLarge, "Invalid"},
		{createRequest, http.StatusTooManyRequests, "RateLimited"},
		{createResolve, http.StatusNotFound, "TemplateNotFound"},
		{createResolve, http.StatusInternalServerError, "Error"},
		{createStart, http.StatusTooManyRequests, "QuotaExceeded"},
		{createStart, http.StatusForbidden, "Refused"},
		{createStart, http.StatusInternalServerError, "Error"},
		{createWait, http.StatusInternalServerError, "SandboxFailed"},
		{createWait, http.StatusGone, "Deleted"},
		{createWait, http.StatusGatewayTimeout, "Timeout"},
		{createWait, 499, "ClientGone"},
	} {
		if got := createFailureReason(tc.stage, tc.code); got != tc.want {
			t.Errorf("createFailureReason(%d, %d) = %q, want %q", tc.stage, tc.code, got, tc.want)
		}
	}
}

// TestCreateFailuresCounted: failed creates move the counter of their
// reason by one each (not parallel: nothing else creates meanwhile).
func TestCreateFailuresCounted(t *testing.T) {
	f := setup(t)
	value := func(reason string) float64 { return testutil.ToFloat64(createFailures.WithLabelValues(reason)) }
	before := map[string]float64{}
	for _, r := range []string{"Invalid", "TemplateNotFound", "Timeout"} {
		before[r] = value(r)
	}
	f.api(t, "POST", "/v2/sandboxes", `{"templateID": `).wantError(t, http.StatusBadRequest, "")
	f.api(t, "POST", "/v2/sandboxes", map[string]any{"templateID": "no-such-template-" + randomID()}).wantError(t, http.StatusNotFound, "")
	_, hs := newTestServer(f.kube, Config{CreateTimeout: time.Second})
	t.Cleanup(hs.Close)
	receive(t, f.createAsync(t, hs.URL, map[string]any{"templateID": "base"}), 15*time.Second).wantError(t, http.StatusGatewayTimeout, "")
	for r, b := range before {
		if got := value(r) - b; got != 1 {
			t.Errorf("%s create failures moved by %v, want 1", r, got)
		}
	}
}

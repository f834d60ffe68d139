package nodeagent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
)

// lyingEnvd streams one stdout message of size bytes, then the end.
type lyingEnvd struct {
	processpbconnect.UnimplementedProcessHandler
	size int
}

func (l lyingEnvd) Start(_ context.Context, _ *connect.Request[processpb.StartRequest],
	s *connect.ServerStream[processpb.StartResponse]) error {
	data := &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte(strings.Repeat("x", l.size))}}
	if err := s.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: data}}}); err != nil {
		return err
	}
	end := &processpb.ProcessEvent_EndEvent{Exited: true}
	return s.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}}})
}

func serveEnvd(t *testing.T, h lyingEnvd) *guestExec {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	g := newGuestExec("127.0.0.1", "token")
	g.base = srv.URL
	return g
}

// TestGuestExecBoundsAMessage: a builder guest's output message over
// maxGuestMessage fails the step instead of growing the agent; output
// under it is passed on.
func TestGuestExecBoundsAMessage(t *testing.T) {
	var got int
	code, err := serveEnvd(t, lyingEnvd{size: 4096}).run(context.Background(), execRequest{Cmd: "true"},
		func(b []byte) { got += len(b) })
	if err != nil || code != 0 || got != 4096 {
		t.Fatalf("a 4 KiB message: code %d, %d bytes, %v", code, got, err)
	}
	_, err = serveEnvd(t, lyingEnvd{size: 2 * maxGuestMessage}).run(context.Background(), execRequest{Cmd: "true"},
		func([]byte) {})
	if err == nil || connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a message of twice the bound: %v, want resource_exhausted", err)
	}
}

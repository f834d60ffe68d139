package bare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// envd answers Start with a start and an end event of exit code exit,
// after checking the command and the headers Command was given.
type envd struct {
	processpbconnect.UnimplementedProcessHandler
	exit  int32
	token string
}

func (e envd) Start(_ context.Context, req *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
	p := req.Msg.GetProcess()
	if got := append([]string{p.GetCmd()}, p.GetArgs()...); !slices.Equal(got, FirstCommand) {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("command %v", got))
	}
	if req.Header().Get("X-Access-Token") != e.token || req.Header().Get("Keepalive-Ping-Interval") != "50" {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("headers"))
	}
	for _, ev := range []*processpb.ProcessEvent{
		{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 7}}},
		{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: e.exit, Exited: true}}},
	} {
		if err := s.Send(&processpb.StartResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

func serve(e envd) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(e))
	return httptest.NewServer(mux)
}

// TestCommand: exit code 0 is success; another exit code or a refusal is
// a failure that reached envd (not retried); no server is unreached.
func TestCommand(t *testing.T) {
	ctx := context.Background()
	ok := serve(envd{token: "tok"})
	defer ok.Close()
	h := http.Header{"X-Access-Token": {"tok"}}
	if err := Command(ctx, ok.Client(), ok.URL, h); err != nil {
		t.Fatalf("exit 0: %v", err)
	}
	if err := Command(ctx, ok.Client(), ok.URL, nil); err == nil || unreached(err) {
		t.Errorf("no token: %v (unreached %v), want a failure that reached envd", err, unreached(err))
	}
	bad := serve(envd{exit: 1})
	defer bad.Close()
	if err := Command(ctx, bad.Client(), bad.URL, nil); err == nil || unreached(err) {
		t.Errorf("exit 1: %v, want a failure that reached envd", err)
	}
	if err := Command(ctx, floorClient, "http://"+closedAddr(t), nil); !unreached(err) {
		t.Errorf("nothing listening: %v, want unreached", err)
	}
}

// TestCommandWhenUp: the floor's command is tried again until envd
// listens.
func TestCommandWhenUp(t *testing.T) {
	addr := closedAddr(t)
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(envd{}))
	srv := &http.Server{Handler: mux}
	defer srv.Close()
	go func() {
		time.Sleep(100 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		_ = srv.Serve(l)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g := vmtest.Guest{Name: "test", Envd: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr)).Port}
	if err := CommandWhenUp(ctx, g); err != nil {
		t.Fatal(err)
	}
}

// closedAddr is a 127.0.0.1 address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

package bare

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	vmtest "github.com/sandlot-dev/sandlot/test/vm"
)

// FirstCommand is the command the E2B benchmark times on both sides, as
// the SDK's sandbox.commands.run('true') sends it (the SDK runs
// `/bin/bash -l -c`; a login shell reads the image's profile, which is
// the image's cost, not the platform's).
var FirstCommand = []string{"/bin/sh", "-c", "true"}

// Command runs FirstCommand through envd's process API at baseURL — a
// Connect process.Process/Start, JSON codec, uncompressed, as the SDK
// sends it — with header added (sandlot-api's routing and the access
// token), and returns once its end event said exit code 0.
func Command(ctx context.Context, hc connect.HTTPClient, baseURL string, header http.Header) error {
	// The SDK's connect-web transport asks for no compression.
	c := processpbconnect.NewProcessClient(hc, baseURL, connect.WithProtoJSON(), connect.WithAcceptCompression("gzip", nil, nil))
	req := connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: FirstCommand[0], Args: FirstCommand[1:]}})
	for k, v := range header {
		req.Header()[k] = v
	}
	req.Header().Set("Keepalive-Ping-Interval", "50") // the SDK's
	stream, err := c.Start(ctx, req)
	if err != nil {
		return fmt.Errorf("process.Process/Start: %w", err)
	}
	defer stream.Close()
	events := 0
	for stream.Receive() {
		events++
		end := stream.Msg().GetEvent().GetEnd()
		if end == nil {
			continue
		}
		if end.GetExitCode() != 0 || !end.GetExited() {
			return fmt.Errorf("process.Process/Start: %v ended %q (exit code %d)", FirstCommand, end.GetStatus(), end.GetExitCode())
		}
		return nil
	}
	if err := stream.Err(); err != nil {
		return &streamError{events: events, err: err}
	}
	return fmt.Errorf("process.Process/Start: the stream ended after %d events without an end event", events)
}

// streamError is a Start stream that failed; with no event received the
// request may not have reached envd.
type streamError struct {
	events int
	err    error
}

func (e *streamError) Error() string {
	return fmt.Sprintf("process.Process/Start: after %d events: %v", e.events, e.err)
}

func (e *streamError) Unwrap() error { return e.err }

// unreached: the request failed before envd answered anything, for a
// reason a later attempt may not meet (the guest's network not up yet).
func unreached(err error) bool {
	var se *streamError
	if errors.As(err, &se) && se.events > 0 {
		return false
	}
	return connect.CodeOf(err) == connect.CodeUnavailable
}

// retryEvery is the period at which the floor's first command is tried
// again while the guest's envd is not reached.
const retryEvery = 20 * time.Millisecond

// CommandWhenUp is the floor's first command: Command sent to g's envd
// (its forwarded host port; the floor's guests need no token) at once,
// and again every 20 ms while the request does not reach envd (a restored
// guest answers TCP as soon as it runs, so the first try usually does).
func CommandWhenUp(ctx context.Context, g vmtest.Guest) error {
	url := fmt.Sprintf("http://127.0.0.1:%d", g.Envd)
	for {
		err := Command(ctx, floorClient, url, nil)
		if err == nil || !unreached(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %w)", url, ctx.Err(), err)
		case <-time.After(retryEvery):
		}
	}
}

// floorClient opens a connection per command: each floor guest is new
// (as sandlot-api's proxy dials each pod anew).
var floorClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

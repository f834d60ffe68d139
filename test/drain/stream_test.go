package drain

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/internal/cluster"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// streamEvent is one line of test/e2b/hold-stream.mjs.
type streamEvent struct {
	Event   string `json:"event"`
	N       int    `json:"n"`
	PID     int    `json:"pid"`
	Before  int    `json:"before"`
	After   int    `json:"after"`
	GapMs   int64  `json:"gapMs"`
	Attempt int    `json:"attempt"`
	Error   string `json:"error"`
}

// streamClient is the E2B SDK (JS, unchanged) holding a command stream
// of one sandbox through sandlot-api.
type streamClient struct {
	events chan streamEvent
	exited chan error
}

// holdStream starts the client on sandbox id and returns once its
// counter's output flows (3 and more).
func holdStream(t *testing.T, id string) *streamClient {
	t.Helper()
	dir := filepath.Join(cluster.RepoRoot(), "test", "e2b")
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node not found: install Node 20 and npm (the E2B SDK client runs on them)")
	}
	npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	npm.Dir = dir
	if out, err := npm.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in test/e2b (installs the pinned e2b SDK): %v\n%s", err, out)
	}
	apiURL, key := sbxtest.APIAccess(t, c)
	run, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	cmd := exec.CommandContext(run, "node", "hold-stream.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+apiURL, "E2B_SANDBOX_URL="+apiURL, "E2B_API_KEY="+key, "SANDLOT_SANDBOX_ID="+id)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &streamClient{events: make(chan streamEvent, 1024), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e streamEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				s.events <- e
			}
		}
		close(s.events)
		s.exited <- cmd.Wait()
	}()
	// A few lines first: the counter's value across the move then tells
	// the same process from a new one.
	for n := -1; n < 3; {
		e, err := s.next("line", 2*time.Minute)
		if err != nil {
			t.Fatalf("the E2B client's stream of %s: %v", id, err)
		}
		n = e.N
	}
	return s
}

// next waits for an event named want (skipping others) for up to d.
func (s *streamClient) next(want string, d time.Duration) (streamEvent, error) {
	deadline := time.After(d)
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				return streamEvent{}, fmt.Errorf("the client exited before %q: %v", want, <-s.exited)
			}
			if e.Event == "retry" {
				fmt.Fprintf(os.Stderr, "E2B client: reconnect attempt %d: %s\n", e.Attempt, e.Error)
			}
			if e.Event == want {
				return e, nil
			}
		case <-deadline:
			return streamEvent{}, fmt.Errorf("no %q within %v", want, d)
		}
	}
}

// reconnected checks that the stream was cut by the move and that the
// client reconnected to the same process, its counter going on from
// where it was (the process and its memory moved), and logs how long
// the client saw no output.
func (s *streamClient) reconnected(t *testing.T) {
	t.Helper()
	cut, err := s.next("cut", 2*time.Minute)
	if err != nil {
		t.Errorf("the E2B client's command stream across the move: %v", err)
		return
	}
	back, err := s.next("reconnected", 3*time.Minute)
	if err != nil {
		t.Errorf("the E2B client after its stream was cut (%s): %v", cut.Error, err)
		return
	}
	if back.After <= back.Before {
		t.Errorf("the counter went from %d to %d across the move: not the same process", back.Before, back.After)
	}
	if err := <-s.exited; err != nil {
		t.Errorf("the E2B client: %v", err)
	}
	t.Logf("E2B client: stream cut (%s), reconnected to pid %d after %d attempt(s); counter %d -> %d; no output for %v",
		cut.Error, back.PID, back.Attempt, back.Before, back.After, time.Duration(back.GapMs)*time.Millisecond)
}

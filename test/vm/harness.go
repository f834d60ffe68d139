// Package vmtest runs sandlot VMs on real QEMU for the VM layer's tests and
// benchmarks: the assets `make vm-assets` built, user-mode networking with
// the guest's ports forwarded to free host ports, and envd/interpreter
// calls into the guest.
package vmtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb"
	"github.com/sandlot-dev/sandlot/guest/envdpb/processpb/processpbconnect"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/internal/vmassets"
	"github.com/sandlot-dev/sandlot/vm"
)

// Env is what `make vm-assets` built (internal/vmassets), with where these
// tests' snapshots may name files (Roots).
type Env struct{ vmassets.Env }

// LoadEnv reads $SANDLOT_CACHE/vm/current.env.
func LoadEnv() (Env, error) {
	e, err := vmassets.Load()
	return Env{e}, err
}

// Guest is how a test reaches one VM: its identity and forwarded ports.
type Guest struct {
	Name     string
	IP       string
	Envd     int // host port forwarded to the guest's 49983
	Interp   int // host port forwarded to the guest's 49999
	Identity identity.Identity
	Net      vm.NetSpec
}

// NewGuest picks free host ports and an identity with guest address ip
// on user-mode networking (10.0.2.0/24, gateway 10.0.2.2).
func NewGuest(name, ip string, n int) (Guest, error) {
	envd, err := freePort()
	if err != nil {
		return Guest{}, err
	}
	interp, err := freePort()
	if err != nil {
		return Guest{}, err
	}
	mac := fmt.Sprintf("52:54:00:5a:%02x:%02x", n/256, n%256)
	g := Guest{Name: name, IP: ip, Envd: envd, Interp: interp,
		Net: vm.NetSpec{MAC: mac, Forwards: []vm.PortForward{{HostPort: envd, GuestIP: ip, GuestPort: 49983},
			{HostPort: interp, GuestIP: ip, GuestPort: 49999}}}}
	// Open: these guests are driven without a token (the VM layer's
	// tests; the token checks are guest/'s and the cluster suites').
	g.Identity = identity.Identity{SandboxID: name, Hostname: name, Open: true,
		Network: &identity.Network{Interface: "eth0", Address: ip + "/24", Gateway: "10.0.2.2", MAC: mac}}
	return g, nil
}

// Forwarded ports come from below the kernel's ephemeral range (32768
// up): a port the kernel hands out for listen(":0") can be handed to an
// outgoing connection between our close and QEMU's bind, and two guests
// started together could get the same one. A counter per process, from
// an offset by pid, keeps this process's ports distinct.
const (
	portBase  = 20000
	portRange = 12000
)

var nextPort atomic.Int64

func init() { nextPort.Store(int64(os.Getpid()*97) % portRange) }

func freePort() (int, error) {
	for range 500 {
		port := portBase + int(nextPort.Add(1)%portRange)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken: the next one
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d", portBase, portBase+portRange-1)
}

// WaitHealth waits for envd's /health (204), polling every 20 ms (the
// benchmarks time restores to it).
func (g Guest) WaitHealth(ctx context.Context) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/health", g.Envd)
	return poll.Every(ctx, 20*time.Millisecond, g.Name+": envd answering at "+url, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
}

// Run runs a shell command in the guest through envd and returns stdout.
func (g Guest) Run(ctx context.Context, cmd string) (string, error) {
	c := processpbconnect.NewProcessClient(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d", g.Envd), connect.WithProtoJSON())
	stream, err := c.Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}}))
	if err != nil {
		return "", fmt.Errorf("%s: %q: %w", g.Name, cmd, err)
	}
	var out, errOut strings.Builder
	code := int32(0)
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		errOut.Write(ev.GetData().GetStderr())
		if end := ev.GetEnd(); end != nil {
			code = end.GetExitCode()
		}
	}
	if err := stream.Err(); err != nil && err != io.EOF {
		return "", fmt.Errorf("%s: %q: %w", g.Name, cmd, err)
	}
	if code != 0 {
		return out.String(), fmt.Errorf("%s: %q exited %d: %s", g.Name, cmd, code, errOut.String())
	}
	return out.String(), nil
}

// RunCode runs python code through the code interpreter and returns the
// main result's text.
func (g Guest) RunCode(ctx context.Context, code string) (string, error) {
	body, _ := json.Marshal(map[string]string{"code": code})
	req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("http://127.0.0.1:%d/execute", g.Interp), strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var msg struct {
			Type, Text, Name, Value string
			IsMain                  bool `json:"is_main_result"`
		}
		if json.Unmarshal(sc.Bytes(), &msg) != nil {
			continue
		}
		switch {
		case msg.Type == "error":
			return "", fmt.Errorf("%s: %s", msg.Name, msg.Value)
		case msg.Type == "result" && msg.IsMain:
			return msg.Text, nil
		}
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("execute: %s", resp.Status)
	}
	return "", sc.Err() // the code ran and gave no value
}

// Roots are where the snapshots of these tests may name files: under the
// temporary directory (parents and their clones' snapshots live in
// different ones) and the cache's base disks.
func (e Env) Roots() vm.Roots {
	return vm.Roots{Store: os.TempDir(), Images: []string{filepath.Dir(e.Debian), filepath.Dir(e.Busy)}}
}

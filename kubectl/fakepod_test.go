package kubectl

// A fake kubelet for the envtest API server, which has none: an HTTP
// server in front of it that answers one pod's exec and log
// subresources itself (with the protocol client-go speaks:
// v5.channel.k8s.io over WebSockets) and
// proxies every other request to the API server. The commands reach it
// through a kubeconfig of their own. Requests for any other pod get 404:
// a command that guessed the pod from the sandbox's name fails.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	gwebsocket "github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// fakePod is what the fake kubelet serves for one pod.
type fakePod struct {
	ns, name string
	// log is the container's log, its lines as the log API sends them.
	log []string
	// root is the VM's "/" for exec: each argument starting with "/" is
	// taken below it, and the command runs on this host.
	root string

	mu       sync.Mutex
	requests []*http.Request // what the subresources were asked
}

// serve starts the fake in front of the fixture's API server and
// returns a kubeconfig for it.
func (p *fakePod) serve(t *testing.T, f *fixture) string {
	t.Helper()
	upstream, err := url.Parse(f.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(f.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.Transport = transport
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pods := "/api/v1/namespaces/" + p.ns + "/pods/"
		rest, ok := strings.CutPrefix(r.URL.Path, pods)
		if !ok || !strings.Contains(rest, "/") {
			proxy.ServeHTTP(w, r)
			return
		}
		p.mu.Lock()
		p.requests = append(p.requests, r)
		p.mu.Unlock()
		switch rest {
		case p.name + "/log":
			p.serveLog(w, r)
		case p.name + "/exec":
			p.serveExec(t, w, r)
		default:
			http.Error(w, "no such pod here: "+rest, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return writeKubeconfig(t, srv.URL)
}

// last is the last request for a subresource.
func (p *fakePod) last(t *testing.T) *http.Request {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.requests) == 0 {
		t.Fatal("no request reached the pod")
	}
	return p.requests[len(p.requests)-1]
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["fake"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["fake"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["fake"] = &clientcmdapi.Context{Cluster: "fake", AuthInfo: "fake"}
	cfg.CurrentContext = "fake"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveLog answers with the log's lines, the last --tail of them.
func (p *fakePod) serveLog(w http.ResponseWriter, r *http.Request) {
	lines := p.log
	if tail := r.URL.Query().Get("tailLines"); tail != "" {
		n, _ := strconv.Atoi(tail)
		lines = lines[max(len(lines)-n, 0):]
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

var upgrader = gwebsocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// serveExec runs the command on this host, its paths under root, its
// streams as frames of v5.channel.k8s.io: a stream's byte, then data;
// [255, id] closes a stream; the status goes on stream 3.
func (p *fakePod) serveExec(t *testing.T, w http.ResponseWriter, r *http.Request) {
	upgrader := upgrader
	upgrader.Subprotocols = []string{rcconst.StreamProtocolV5Name}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		t.Errorf("exec: upgrade: %v", err)
		return
	}
	defer conn.Close()
	args := r.URL.Query()["command"]
	for i, a := range args {
		if strings.HasPrefix(a, "/") {
			args[i] = filepath.Join(p.root, a)
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	stdin, _ := cmd.StdinPipe()
	var mu sync.Mutex
	send := func(id byte, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		_ = conn.WriteMessage(gwebsocket.BinaryMessage, append([]byte{id}, b...))
	}
	cmd.Stdout, cmd.Stderr = frameWriter{1, send}, frameWriter{2, send}
	go readStdin(conn, stdin)
	status := metav1.Status{Status: metav1.StatusSuccess}
	var exit *exec.ExitError
	switch err := cmd.Run(); {
	case errors.As(err, &exit):
		status = metav1.Status{Status: metav1.StatusFailure, Reason: "NonZeroExitCode", Details: &metav1.StatusDetails{
			Causes: []metav1.StatusCause{{Type: "ExitCode", Message: strconv.Itoa(exit.ExitCode())}}}}
	case err != nil:
		status = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
	}
	b, _ := json.Marshal(status)
	send(3, b)
	mu.Lock()
	_ = conn.WriteMessage(gwebsocket.CloseMessage, gwebsocket.FormatCloseMessage(gwebsocket.CloseNormalClosure, ""))
	mu.Unlock()
}

type frameWriter struct {
	id   byte
	send func(byte, []byte)
}

func (f frameWriter) Write(b []byte) (int, error) {
	f.send(f.id, b)
	return len(b), nil
}

// readStdin feeds stream 0 to the command until the client closes it.
func readStdin(conn *gwebsocket.Conn, stdin io.WriteCloser) {
	defer stdin.Close()
	for {
		_, b, err := conn.ReadMessage()
		if err != nil || len(b) == 0 {
			return
		}
		switch {
		case b[0] == rcconst.StreamClose && len(b) > 1 && b[1] == 0:
			stdin.Close()
		case b[0] == 0:
			_, _ = stdin.Write(b[1:])
		}
	}
}

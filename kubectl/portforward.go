package kubectl

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// port-forward is kubectl port-forward to the pod that holds the sandbox
// now (status.podName): the API server's portforward subresource, which
// the container runtime serves by dialing localhost in the pod's netns,
// and the shim sends localhost there on to the VM.
func (r *root) portForwardCmd() *cobra.Command {
	var addresses []string
	cmd := &cobra.Command{
		Use:   "port-forward SANDBOX [LOCAL_PORT:]REMOTE_PORT [...]",
		Short: "Forward local ports to ports in a sandbox's VM (as kubectl port-forward, to the pod that holds it)",
		Long: "port-forward listens on local ports and forwards each connection to a port in the sandbox's VM,\n" +
			"through the API server, as kubectl port-forward does for a pod. REMOTE_PORT alone listens on the\n" +
			"same local port; :REMOTE_PORT on a free one (printed). It runs until interrupted, or until the\n" +
			"sandbox's pod goes (a pause, a kill): run it again after a resume.",
		Example: "  kubectl sandlot port-forward my-sandbox 8080\n" +
			"  kubectl sandlot port-forward my-sandbox 9000:8080 :3000\n" +
			"  kubectl sandlot port-forward my-sandbox 8080 --address 0.0.0.0",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errUsage(cmd, "port-forward expects SANDBOX and at least one [LOCAL_PORT:]REMOTE_PORT")
			}
			return checkPortSpecs(args[1:])
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return r.completeSandboxes(cmd, args, prefix)
		},
		RunE: func(cmd *cobra.Command, args []string) error { return r.portForward(cmd, addresses, args[0], args[1:]) },
	}
	cmd.Flags().StringSliceVar(&addresses, "address", []string{"localhost"},
		"addresses to listen on (comma separated): IP addresses or localhost")
	return cmd
}

// checkPortSpecs refuses what kubectl port-forward would: each spec is
// [LOCAL_PORT:]REMOTE_PORT, the remote port 1-65535, the local one
// 0-65535 or empty (a free port).
func checkPortSpecs(specs []string) error {
	for _, s := range specs {
		local, remote, pair := strings.Cut(s, ":")
		if !pair {
			local, remote = s, s
		}
		if p, err := strconv.ParseUint(remote, 10, 16); err != nil || p == 0 {
			return fmt.Errorf("port %q: the remote port must be a number from 1 to 65535 ([LOCAL_PORT:]REMOTE_PORT)", s)
		}
		if _, err := strconv.ParseUint(local, 10, 16); local != "" && err != nil {
			return fmt.Errorf("port %q: the local port must be a number from 0 to 65535, or empty for a free one", s)
		}
	}
	return nil
}

func (r *root) portForward(cmd *cobra.Command, addresses []string, name string, ports []string) error {
	s, err := r.session()
	if err != nil {
		return err
	}
	pod, err := s.sandboxPod(cmd.Context(), name, "forward ports to")
	if err != nil {
		return err
	}
	core, err := s.core()
	if err != nil {
		return err
	}
	u := core.RESTClient().Post().Resource("pods").Namespace(s.ns).Name(pod).SubResource("portforward").URL()
	dialer, err := portForwardDialer(s.cfg, u)
	if err != nil {
		return err
	}
	fw, err := portforward.NewOnAddressesWithContext(cmd.Context(), dialer, addresses, ports, nil, s.out, s.errOut)
	if err != nil {
		return fmt.Errorf("port-forward to sandbox %s: %w", name, err)
	}
	if err := fw.ForwardPorts(); err != nil {
		return fmt.Errorf("port-forward to sandbox %s (pod %s): %w", name, pod, err)
	}
	return nil
}

// portForwardDialer tunnels over WebSockets, falling back to SPDY for API
// servers without them, as kubectl does.
func portForwardDialer(cfg *rest.Config, u *url.URL) (httpstream.Dialer, error) {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("set up port-forward over SPDY: %w", err)
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	ws, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
	if err != nil {
		return nil, fmt.Errorf("set up port-forward over WebSockets: %w", err)
	}
	return portforward.NewFallbackDialer(ws, spdyDialer, upgradeRefused), nil
}

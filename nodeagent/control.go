package nodeagent

import (
	"context"

	"github.com/sandlot-dev/sandlot/api/node"
	"github.com/sandlot-dev/sandlot/api/node/controlapi"
)

// Control is one connection to a pod's shim control service.
type Control interface {
	controlapi.VMControlService
	Close() error
}

// ControlDialer reaches the control service of a pod's shim. It is a
// seam so the reconcilers can be tested against a fake shim; production
// uses SocketDialer.
type ControlDialer interface {
	Dial(ctx context.Context, podUID string) (Control, error)
}

// SocketDialer dials the shims' control sockets under Root
// (<root>/pods/<podUID>/control.sock).
type SocketDialer struct{ Root string }

func (d SocketDialer) Dial(ctx context.Context, podUID string) (Control, error) {
	c, err := controlapi.Dial(ctx, node.Layout{Root: d.Root}.ControlSocket(podUID))
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return c, nil
}

// dial reaches a pod's shim through n.Dialer, or its socket under
// SandlotRoot when none was injected.
func (n Node) dial(ctx context.Context, podUID string) (Control, error) {
	if n.Dialer != nil {
		return n.Dialer.Dial(ctx, podUID)
	}
	return SocketDialer{Root: n.SandlotRoot}.Dial(ctx, podUID)
}

package controlapi

import (
	"context"
	"fmt"
	"net"

	"github.com/containerd/ttrpc"
)

// Client is a connection to one VM's control socket.
type Client struct {
	VMControlService
	conn *ttrpc.Client
}

// Dial connects to a shim's control socket (<root>/pods/<podUID>/control.sock).
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("control API %s: %w", path, err)
	}
	c := ttrpc.NewClient(conn)
	return &Client{VMControlService: NewVMControlClient(c), conn: c}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// StateEmpty is StatsResponse.state of a start slot: its pod runs, no VM
// does until a claim's Restore (the other states are the VM's own).
const StateEmpty = "Empty"

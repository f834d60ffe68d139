package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"

	"github.com/containerd/errdefs"
	"github.com/containerd/ttrpc"

	"github.com/sandlot-dev/sandlot/api/node/controlapi"
	"github.com/sandlot-dev/sandlot/guest/identity"
)

// controlServer serves the VM control API on the pod's control socket.
type controlServer struct {
	srv *ttrpc.Server
	ln  net.Listener
}

// serveControl starts the control API (p.mu is held).
func (p *pod) serveControl(api controlapi.VMControlService) error {
	path := p.cfg.Layout().ControlSocket(p.uid)
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		ln.Close()
		return err
	}
	controlapi.RegisterVMControlService(srv, api)
	go func() { _ = srv.Serve(context.Background(), ln) }()
	p.control = &controlServer{srv: srv, ln: ln}
	return nil
}

func (c *controlServer) close() error {
	err := c.srv.Close()
	if errors.Is(err, ttrpc.ErrServerClosed) {
		return nil
	}
	return err
}

// controlAPI implements the control API for one pod.
type controlAPI struct {
	s   *service
	pod *pod
}

// vmOpTimeout bounds a VM operation once started.
const vmOpTimeout = 5 * time.Minute

// detached runs a VM operation to its end even when the caller goes away
// (an agent killed mid-snapshot must not leave the VM stopped halfway).
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), vmOpTimeout)
}

func (a *controlAPI) Pause(ctx context.Context, _ *controlapi.PauseRequest) (*controlapi.PauseResponse, error) {
	ctx, cancel := detached(ctx)
	defer cancel()
	return &controlapi.PauseResponse{}, a.withVM(func() error { return a.pod.vm.Pause(ctx) })
}

func (a *controlAPI) Resume(ctx context.Context, _ *controlapi.ResumeRequest) (*controlapi.ResumeResponse, error) {
	ctx, cancel := detached(ctx)
	defer cancel()
	return &controlapi.ResumeResponse{}, a.withVM(func() error { return a.pod.vm.Resume(ctx) })
}

func (a *controlAPI) Snapshot(ctx context.Context, r *controlapi.SnapshotRequest) (*controlapi.SnapshotResponse, error) {
	if !filepath.IsAbs(r.GetDir()) {
		return nil, fmt.Errorf("snapshot directory %q is not an absolute path", r.GetDir())
	}
	caller := ctx
	ctx, cancel := detached(ctx)
	defer cancel()
	start := time.Now()
	resp := &controlapi.SnapshotResponse{}
	err := a.withVM(func() error {
		// Queued behind another operation of this VM while the caller went
		// away: it no longer wants the snapshot. Once begun, it completes.
		if err := caller.Err(); err != nil {
			return fmt.Errorf("snapshot not started: the caller went away: %w", err)
		}
		m, err := a.pod.vm.Snapshot(ctx, r.GetDir())
		if err != nil {
			return err
		}
		resp.ManifestJson, err = json.Marshal(m)
		resp.PausedNanos = m.PausedNanos
		return err
	})
	resp.TookNanos = int64(time.Since(start))
	return resp, err
}

func (a *controlAPI) Restore(ctx context.Context, r *controlapi.RestoreRequest) (*controlapi.RestoreResponse, error) {
	ctx, cancel := detached(ctx)
	defer cancel()
	start := time.Now()
	if err := a.s.restoreInPlace(ctx, a.pod, restoreOrder{dir: r.GetDir(), requestID: r.GetRequestId(), as: r.GetIdentity()}); err != nil {
		return nil, err
	}
	return &controlapi.RestoreResponse{TookNanos: int64(time.Since(start))}, nil
}

// restoreOrder is one Restore request: the data, its idempotency key, and
// the sandbox identity the restored VM takes (nil: the pod's own).
type restoreOrder struct {
	dir, requestID string
	as             *controlapi.SetIdentityRequest
}

// withSandbox is id with the sandbox identity o carries (none: id).
func (o restoreOrder) withSandbox(id identity.Identity) identity.Identity {
	if o.as == nil {
		return id
	}
	id.SandboxID, id.AccessToken, id.Env = o.as.GetSandboxId(), o.as.GetAccessToken(), o.as.GetEnv()
	if o.as.GetHostname() != "" {
		id.Hostname = o.as.GetHostname()
	}
	return id
}

func (a *controlAPI) Stats(_ context.Context, _ *controlapi.StatsRequest) (*controlapi.StatsResponse, error) {
	resp := &controlapi.StatsResponse{}
	if a.pod.empty() {
		resp.State = controlapi.StateEmpty // a start slot waiting for its claim
		return resp, nil
	}
	return resp, a.withVM(func() error {
		st, err := a.pod.vm.Stats()
		if err != nil {
			return err
		}
		resp.State = string(a.pod.vm.State())
		resp.PssBytes, resp.PrivateBytes, resp.CpuNanos = st.PSSBytes, st.PrivateBytes, int64(st.CPU)
		resp.QemuPid, resp.Accel, resp.GuestAgent = int32(a.pod.vm.PID()), a.pod.vm.Accel(), a.pod.vm.GuestAgent()
		return nil
	})
}

func (a *controlAPI) SetIdentity(ctx context.Context, r *controlapi.SetIdentityRequest) (*controlapi.SetIdentityResponse, error) {
	return &controlapi.SetIdentityResponse{}, a.withVM(func() error {
		id := a.pod.identity
		id.SandboxID, id.AccessToken, id.Env = r.GetSandboxId(), r.GetAccessToken(), r.GetEnv()
		if r.GetHostname() != "" {
			id.Hostname = r.GetHostname()
		}
		id.Network, id.UnixNano = nil, time.Now().UnixNano() // the network stays the pod's
		began := time.Now()
		res, err := a.pod.vm.SetIdentity(ctx, id)
		logf(ctx, "sandbox %s: identity set in %s (the guest's handler: %s)", id.SandboxID,
			time.Since(began).Round(100*time.Microsecond), guestTime(res.StepNanos))
		if err == nil {
			err = res.Err()
		}
		if err != nil {
			return fmt.Errorf("set identity: %w", err)
		}
		id.Network = a.pod.identity.Network
		a.pod.identity = id
		return nil
	})
}

// guestTime is the time the guest says its steps took, summed: the
// guest's answer is not trusted, so only a bounded figure reaches the
// node's log, never its step names.
func guestTime(steps map[string]int64) time.Duration {
	var sum time.Duration
	for _, ns := range steps {
		sum += time.Duration(min(max(ns, 0), int64(time.Minute)))
	}
	return min(sum, time.Hour).Round(100 * time.Microsecond)
}

// SetNetwork applies the sandbox's rules the agent read from the pod's
// annotation (decoded by the API's codec: unknown fields are refused).
func (a *controlAPI) SetNetwork(_ context.Context, r *controlapi.SetNetworkRequest) (*controlapi.SetNetworkResponse, error) {
	n, _, err := sandlotv1.DecodeNetwork(r.GetNetworkJson())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	var ingress []netip.Prefix
	for _, s := range r.GetIngressFrom() {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("%w: ingress_from %q: want an IPv4 address", errdefs.ErrInvalidArgument, s)
		}
		ingress = append(ingress, netip.PrefixFrom(a, 32))
	}
	return &controlapi.SetNetworkResponse{}, a.pod.applyNetwork(n, ingress)
}

// withVM runs fn with the pod's VM present and the pod locked.
func (a *controlAPI) withVM(fn func() error) error {
	return a.pod.withVM(func(machine) error { return fn() })
}

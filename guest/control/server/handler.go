package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandlot-dev/sandlot/guest/control"
	"github.com/sandlot-dev/sandlot/guest/identity"
	"github.com/sandlot-dev/sandlot/internal/version"
)

// Reaper starts a child without racing a central reaper that calls
// wait4(-1) (pid1.Reaper implements it). start forks and returns the pid;
// exited receives the child's wait status once.
type Reaper interface {
	Start(start func() (pid int, err error)) (pid int, exited <-chan unix.WaitStatus, err error)
}

// Options configure a Handler.
type Options struct {
	// ApplyHost lets setIdentity change this machine: hostname, network
	// and clock. Set it in the VM (sandlot-guest as PID 1); leave it false
	// on a host, where setIdentity only records the identity and reseeds.
	ApplyHost bool
	// Reaper, when set, starts and waits for processes (required when the
	// guest agent is PID 1 with a central reaper); nil waits with os.Process.
	Reaper Reaper
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MaxBufferedOutput bounds, per process stream, the output kept while
	// no host is attached (oldest dropped). Default 1 MiB.
	MaxBufferedOutput int
	// MaxFrameSize bounds incoming frames. Default control.MaxFrameSize.
	MaxFrameSize int
	// MaxExited bounds how many exited processes stay waitable.
	// Default 256.
	MaxExited int
	// LogFIFO is the log FIFO's path (control.LogFIFO).
	LogFIFO string

	// hostnameFile follows the hostname when ApplyHost (tests point it
	// elsewhere); default /etc/hostname if it exists.
	hostnameFile string
	// resolvConf is written from the identity's DNS (tests point it
	// elsewhere).
	resolvConf string
}

const (
	defaultMaxBuffered = 1 << 20
	defaultMaxExited   = 256
	maxInFlight        = 1024
)

// Handler is the guest side of the control channel: the methods and the
// state that outlives connections (processes, undelivered events).
type Handler struct {
	store *identity.Store
	opts  Options
	log   *slog.Logger

	ev  eventQueue
	nic nic // the NIC setIdentity configures

	hostnameMu    sync.Mutex
	hostnameBound bool // the hostname file is bound to the kernel's

	volumesMu sync.Mutex
	mounted   []identity.Volume // what mountVolumes mounted for this identity

	procMu sync.Mutex
	procs  map[int]*process
	exited []*process // in exit order, for eviction

	closeOnce sync.Once
	closed    chan struct{}
}

// NewHandler returns a Handler recording identities in store.
func NewHandler(store *identity.Store, opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBufferedOutput <= 0 {
		opts.MaxBufferedOutput = defaultMaxBuffered
	}
	if opts.MaxFrameSize <= 0 {
		opts.MaxFrameSize = control.MaxFrameSize
	}
	if opts.MaxExited <= 0 {
		opts.MaxExited = defaultMaxExited
	}
	if opts.LogFIFO == "" {
		opts.LogFIFO = control.LogFIFO
	}
	if opts.resolvConf == "" {
		opts.resolvConf = "/etc/resolv.conf"
	}
	if opts.hostnameFile == "" {
		opts.hostnameFile = "/etc/hostname"
	}
	h := &Handler{
		store:  store,
		opts:   opts,
		log:    opts.Logger,
		procs:  map[int]*process{},
		closed: make(chan struct{}),
	}
	h.ev.init(opts.MaxBufferedOutput, opts.Logger)
	return h
}

// Store is the identity store setIdentity writes.
func (h *Handler) Store() *identity.Store { return h.store }

// Close kills the processes still running and detaches the host.
func (h *Handler) Close() error {
	h.closeOnce.Do(func() {
		close(h.closed)
		h.nic.mu.Lock()
		h.nic.close()
		h.nic.mu.Unlock()
		h.procMu.Lock()
		var running []*process
		for _, p := range h.procs {
			running = append(running, p)
		}
		h.procMu.Unlock()
		for _, p := range running {
			p.kill()
		}
		h.ev.detachAll()
	})
	return nil
}

type methodFunc func(h *Handler, ctx context.Context, params json.RawMessage) (any, error)

// methods are handled on their own goroutine; writeStdin, closeStdin and
// cancel are handled in order on the reader (see ServerConn.dispatch).
var methods = map[string]methodFunc{
	control.MethodPing:            (*Handler).ping,
	control.MethodSetIdentity:     (*Handler).setIdentityMethod,
	control.MethodPrepareSnapshot: (*Handler).prepareSnapshot,
	control.MethodRestoreNetwork:  (*Handler).restoreNetwork,
	control.MethodMountVolumes:    (*Handler).mountVolumesMethod,
	control.MethodStart:           (*Handler).startMethod,
	control.MethodSignal:          (*Handler).signalMethod,
	control.MethodWait:            (*Handler).waitMethod,
	control.MethodResize:          (*Handler).resizeMethod,
}

func (h *Handler) ping(_ context.Context, _ json.RawMessage) (any, error) {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return control.PingResult{Version: control.ProtocolVersion, UptimeNanos: ts.Nano(), BootID: bootID(), Agent: version.Version}, nil
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (h *Handler) setIdentityMethod(ctx context.Context, raw json.RawMessage) (any, error) {
	var p control.SetIdentityParams
	if e := control.DecodeParams(raw, &p); e != nil {
		return nil, e
	}
	return h.SetIdentity(p), nil
}

// prepareSnapshot flushes every filesystem so the disk layer the host
// persists next is consistent with the memory image. The page cache is
// kept on purpose (it is part of the snapshot and warm after restore).
// With dropNetwork, the NIC's network goes too (PrepareSnapshotParams).
func (h *Handler) prepareSnapshot(_ context.Context, raw json.RawMessage) (any, error) {
	var p control.PrepareSnapshotParams
	if e := control.DecodeParams(raw, &p); e != nil {
		return nil, e
	}
	t0 := time.Now()
	syncLocal()
	res := control.PrepareSnapshotResult{Synced: true}
	if n := h.store.Get().Network; p.DropNetwork && h.opts.ApplyHost && n != nil {
		if err := h.nic.dropNetwork(*n); err != nil {
			return nil, fmt.Errorf("drop the network: %w", err)
		}
		res.NetworkDropped = true
	}
	res.TookNanos = time.Since(t0).Nanoseconds()
	return res, nil
}

// restoreNetwork gives a VM whose network prepareSnapshot dropped its
// recorded network back.
func (h *Handler) restoreNetwork(_ context.Context, _ json.RawMessage) (any, error) {
	n := h.store.Get().Network
	if !h.nic.networkDropped() || n == nil {
		return control.RestoreNetworkResult{}, nil
	}
	if err := h.nic.apply(*n, nil, nil); err != nil {
		return nil, fmt.Errorf("restore the network: %w", err)
	}
	return control.RestoreNetworkResult{Network: true}, nil
}

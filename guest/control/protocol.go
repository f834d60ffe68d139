package control

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandlot-dev/sandlot/guest/identity"
)

// ProtocolVersion is the wire protocol's version, reported by ping.
const ProtocolVersion = 1

// MaxFrameSize bounds one frame, newline included.
const MaxFrameSize = 16 << 20

// Method names.
const (
	MethodPing            = "ping"
	MethodSetIdentity     = "setIdentity"
	MethodPrepareSnapshot = "prepareSnapshot"
	MethodRestoreNetwork  = "restoreNetwork"
	MethodMountVolumes    = "mountVolumes"
	MethodStart           = "start"
	MethodSignal          = "signal"
	MethodWait            = "wait"
	MethodWriteStdin      = "writeStdin"
	MethodCloseStdin      = "closeStdin"
	MethodResize          = "resize"
	MethodCancel          = "cancel"
)

// Event names.
const (
	EventOutput = "output"
	EventExit   = "exit"
)

// Output stream names.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Error codes.
const (
	CodeBadFrame      = "bad_frame"       // not a JSON object, or not a request
	CodeFrameTooLarge = "frame_too_large" // longer than MaxFrameSize
	CodeUnknownMethod = "unknown_method"
	CodeInvalidParams = "invalid_params"
	CodeNotFound      = "not_found" // no such process
	CodeBusy          = "busy"      // too many requests in flight
	CodeCanceled      = "canceled"
	CodeFailed        = "failed" // the operation itself failed
)

// Frame is one line on the wire: a request, a reply or an event.
type Frame struct {
	ID     uint64          `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Event  string          `json:"event,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Error is an error reply. It is also the error the Client returns for it.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "guest: " + e.Code
	}
	return "guest: " + e.Code + ": " + e.Message
}

// Is matches another *Error with the same code, so
// errors.Is(err, &control.Error{Code: control.CodeNotFound}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf builds a reply error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError turns any error into a reply error (code failed unless it is
// already an *Error).
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeFailed, Message: err.Error()}
}

// DecodeRequest parses one request frame (without its newline). A frame
// that is not a request gets an *Error to send back with id 0 (or the
// frame's id when it has one).
func DecodeRequest(line []byte) (Frame, *Error) {
	var f Frame
	if err := json.Unmarshal(line, &f); err != nil {
		return Frame{}, Errorf(CodeBadFrame, "decode frame: %v", err)
	}
	switch {
	case f.ID == 0:
		return f, Errorf(CodeBadFrame, "request without id")
	case f.Method == "":
		return f, Errorf(CodeBadFrame, "request %d without method", f.ID)
	case f.Result != nil || f.Error != nil || f.Event != "":
		return f, Errorf(CodeBadFrame, "request %d carries a reply or event", f.ID)
	}
	return f, nil
}

// DecodeParams unmarshals params into v; missing params decode as {}.
// A bad value is an invalid_params error, ready to reply with.
func DecodeParams(raw json.RawMessage, v any) *Error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return Errorf(CodeInvalidParams, "%v", err)
	}
	return nil
}

// PingResult is ping's reply.
type PingResult struct {
	Version int `json:"version"`
	// UptimeNanos is the guest's CLOCK_BOOTTIME (it keeps counting from
	// the snapshot's value after a restore).
	UptimeNanos int64 `json:"uptimeNanos"`
	// BootID is /proc/sys/kernel/random/boot_id; clones of one snapshot
	// share it.
	BootID string `json:"bootID"`
	// Agent is the guest agent's release version (internal/version): a
	// VM restored from a snapshot runs the agent the snapshot captured.
	Agent string `json:"agent,omitempty"`
}

// SetIdentityParams is setIdentity's request: the identity (its fields
// inline) and a host-provided random seed (base64 in JSON).
type SetIdentityParams struct {
	identity.Identity
	Seed []byte `json:"seed,omitempty"`
}

// SetIdentityResult says what setIdentity applied.
type SetIdentityResult struct {
	Stored   bool `json:"stored"`   // recorded in the identity store
	Hostname bool `json:"hostname"` // kernel hostname set
	Network  bool `json:"network"`  // NIC reconfigured
	Clock    bool `json:"clock"`    // CLOCK_REALTIME stepped
	Entropy  bool `json:"entropy"`  // seed added with RNDADDENTROPY
	Reseeded bool `json:"reseeded"` // RNDRESEEDCRNG done
	// Errors lists the steps that failed, as "step: error".
	Errors []string `json:"errors,omitempty"`
	// StepNanos is how long each step took in the guest (restore latency
	// is mostly this under TCG: every clone runs these paths for the
	// first time).
	StepNanos map[string]int64 `json:"stepNanos,omitempty"`
	// Agent is the guest agent's release version (internal/version): the
	// host learns which guest a VM runs at every boot, restore and claim.
	Agent string `json:"agent,omitempty"`
}

// Err is nil when every step setIdentity attempted worked.
func (r SetIdentityResult) Err() error {
	if len(r.Errors) == 0 {
		return nil
	}
	errs := make([]error, len(r.Errors))
	for i, e := range r.Errors {
		errs[i] = errors.New(e)
	}
	return fmt.Errorf("setIdentity: %w", errors.Join(errs...))
}

// PrepareSnapshotParams is prepareSnapshot's request.
type PrepareSnapshotParams struct {
	// DropNetwork removes the NIC's address, routes and neighbours (the
	// identity stays recorded): a clone of the snapshot then only adds
	// its own, which under TCG saves it the costly removal. The host has
	// the VM restore its network once it runs again.
	DropNetwork bool `json:"dropNetwork,omitempty"`
}

// PrepareSnapshotResult is prepareSnapshot's reply.
type PrepareSnapshotResult struct {
	Synced         bool  `json:"synced"`
	NetworkDropped bool  `json:"networkDropped,omitempty"`
	TookNanos      int64 `json:"tookNanos"`
}

// RestoreNetworkResult is restoreNetwork's reply: whether the NIC got its
// network back (false when it had not been dropped).
type RestoreNetworkResult struct {
	Network bool `json:"network"`
}

// MountVolumesResult is mountVolumes' reply: how many of the identity's
// volumes are mounted (setIdentity unmounts the previous identity's; the
// host asks for the mounts once the VM's network is open).
type MountVolumesResult struct {
	Mounted   int   `json:"mounted"`
	TookNanos int64 `json:"tookNanos"`
}

// StartParams is start's request.
type StartParams struct {
	Args []string `json:"args"`
	// Env entries ("K=V") override the sandbox's identity env, which
	// overrides a default PATH.
	Env []string `json:"env,omitempty"`
	Cwd string   `json:"cwd,omitempty"`
	// UID and GID default to the guest agent's own.
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`
	// Terminal runs the process on a new pseudo-terminal (its own
	// session); its output is one stream, stdout.
	Terminal bool   `json:"terminal,omitempty"`
	Cols     uint16 `json:"cols,omitempty"`
	Rows     uint16 `json:"rows,omitempty"`
	// Log makes the guest's log FIFO (LogFIFO) feed this process's stdout
	// stream too: any process of the guest may write lines into the
	// container's log (a built template's start command does). The shim
	// asks it for the container's init process.
	Log bool `json:"log,omitempty"`
}

// LogFIFO is where guest processes write lines for the container's log.
const LogFIFO = "/run/sandlot/log"

// StartResult is start's reply.
type StartResult struct {
	PID int `json:"pid"`
}

// SignalParams is signal's request.
type SignalParams struct {
	PID    int `json:"pid"`
	Signal int `json:"signal"`
	// Group signals the process group (every process is started as a
	// group leader).
	Group bool `json:"group,omitempty"`
}

// PIDParams names a process (wait, closeStdin).
type PIDParams struct {
	PID int `json:"pid"`
}

// WriteStdinParams is writeStdin's request.
type WriteStdinParams struct {
	PID  int    `json:"pid"`
	Data []byte `json:"data"`
}

// ResizeParams is resize's request (terminal processes only).
type ResizeParams struct {
	PID  int    `json:"pid"`
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// CancelParams is cancel's request.
type CancelParams struct {
	ID uint64 `json:"id"`
}

// ExitStatus is how a process ended: wait's reply and the exit event.
type ExitStatus struct {
	PID int `json:"pid"`
	// Status is the exit code, or 128+signal when killed by a signal.
	Status int `json:"status"`
	Signal int `json:"signal,omitempty"`
}

// String describes the exit for logs.
func (e ExitStatus) String() string {
	if e.Signal != 0 {
		return fmt.Sprintf("pid %d killed by signal %d", e.PID, e.Signal)
	}
	return fmt.Sprintf("pid %d exited %d", e.PID, e.Status)
}

// OutputEvent is the output event's params.
type OutputEvent struct {
	PID    int    `json:"pid"`
	Stream string `json:"stream"`
	Data   []byte `json:"data"`
	// Dropped counts bytes of this stream dropped before Data because no
	// host was attached and the buffer was full.
	Dropped int64 `json:"dropped,omitempty"`
}

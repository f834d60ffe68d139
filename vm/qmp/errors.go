package qmp

import (
	"errors"
	"fmt"
)

// ErrClosed is wrapped by every error caused by the monitor connection being
// gone: QEMU exited, the socket hit EOF or a protocol error, or Close was
// called. The underlying cause is wrapped as well.
var ErrClosed = errors.New("qmp: monitor closed")

// errClosedByClient is the cause recorded when the caller itself closes.
var errClosedByClient = errors.New("closed by client")

// Error is an error reply from QEMU: {"error":{"class":...,"desc":...}}.
// Callers get it through errors.As; Class is QEMU's ErrorClass, for example
// "GenericError", "CommandNotFound" or "DeviceNotFound".
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("qmp error %s: %s", e.Class, e.Desc)
}

// MigrationError reports a migration that ended in status "failed" or
// "cancelled". Desc is QEMU's error-desc when it gave one.
type MigrationError struct {
	Status string
	Desc   string
}

func (e *MigrationError) Error() string {
	desc := e.Desc
	if desc == "" {
		desc = "QEMU gave no error-desc"
	}
	return fmt.Sprintf("qmp: migration %s: %s", e.Status, desc)
}

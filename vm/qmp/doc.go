// Package qmp is sandlot's own client for the QEMU Machine Protocol (QMP),
// the JSON-lines control socket that QEMU opens with
// `-qmp unix:PATH,server=on,wait=off`.
//
// It is deliberately small (standard library plus golang.org/x/sys/unix) and
// covers exactly what the VM layer needs: the handshake, concurrent commands
// matched to replies by id, asynchronous events, passing file descriptors
// with getfd over SCM_RIGHTS, and the stop/cont/migrate calls used to
// snapshot and clone microVMs.
//
// Failure model: when QEMU dies or the socket closes, every pending and later
// call returns an error wrapping [ErrClosed] (and the underlying cause), and
// [Monitor.Done] is closed. No call blocks on a dead QEMU.
//
// Migration URIs: sandlot only ever migrates over file descriptors handed to
// QEMU with [Monitor.SendFD], so [Monitor.Migrate] and
// [Monitor.MigrateIncoming] accept only "fd:NAME" URIs. "exec:" URIs would
// make QEMU run a shell command, and QEMU 7.2 has no "file:" URI.
package qmp

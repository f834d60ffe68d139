// Package control is the host↔guest control channel: the wire protocol
// and the host-side Client the shim and the node agent use. The guest's
// side (Handler, Serve) is package server, kept apart so that the host
// does not build the guest's netlink, pty and process code.
//
// # Transport
//
// The channel is a byte stream. In a VM it is a virtio-serial port (a char
// device such as /dev/vport0p1 or /dev/virtio-ports/ctl) whose host end is
// QEMU's chardev unix socket: QEMU listens, the host dials it with Dial,
// and the guest serves the device with server.Serve. Serve keeps serving
// across host disconnects: a virtio-serial read returns EOF while no host
// is connected, so the guest closes and reopens the port and waits (SIGIO,
// with a short polling fallback) until a host is connected again.
//
// Outside a VM (tests, running the guest agent on a host) Serve is given a
// unix socket path instead: the guest listens there and the host dials it
// with the same Dial. Either side may be the listener:
// server.NewServerConn serves any established stream and NewClient speaks
// over any established stream (a dialled or accepted net.Conn, a
// net.Pipe, an open device).
//
// One host at a time: a newly attached connection takes over from the
// previous one, which is closed. Events produced while no host is attached
// are kept (bounded) and delivered to the next one.
//
// # Protocol
//
// Frames are JSON objects, one per line ("\n"-terminated), at most
// MaxFrameSize bytes. Requests are multiplexed by id:
//
//	host → guest  {"id":N,"method":"...","params":{...}}
//	guest → host  {"id":N,"result":{...}}
//	guest → host  {"id":N,"error":{"code":"...","message":"..."}}
//	guest → host  {"event":"...","params":{...}}
//
// Requests are handled concurrently; replies may come in any order. A
// frame that cannot be parsed (bad JSON, too large, no id) gets an error
// reply with id 0 and the channel keeps working. The host cancels a
// request with {"id":M,"method":"cancel","params":{"id":N}}.
//
// Methods: ping, setIdentity, prepareSnapshot, start, signal, wait,
// writeStdin, closeStdin, resize, cancel. Events: output (process output,
// base64 data) and exit. The exit event of a process always follows all
// of its output that was read before it exited, and a wait reply always
// follows the exit event on the same connection.
//
// The host never stops reading the connection (replies would wait behind
// events): events its consumers do not read are kept up to a bound, then
// output is dropped and the loss reported in Dropped (see Subscription).
//
// ProtocolVersion is reported by ping; it changes only on incompatible
// changes (new methods and fields are compatible).
package control

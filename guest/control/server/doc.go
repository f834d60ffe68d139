// Package server is the guest's side of the control channel: the Handler
// that runs its methods (setIdentity's hostname, NIC and RNG reseed;
// processes with their pipes, ptys and stdin) and Serve, which serves it
// on the virtio-serial port or a unix socket. Package control has the
// protocol and the host's Client; this code lives apart so that the host
// side (shim, vm, node agent) never builds it. See package control for
// the transport and the protocol.
package server

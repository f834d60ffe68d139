package podnet

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// guest stands in for the VM: a netns whose tap carries the pod's MAC
// and IP (default route via the pod's gateway), its frames pumped to and
// from the pod's tap as QEMU does. It returns the guest netns's path.
func (e *env) guest(t *testing.T, podTap *os.File) string {
	g := &env{nsName: e.nsName + "g"}
	g.addNetns(t)
	gns := "/run/netns/" + g.nsName
	var fd int
	must(t, "open the guest's tap", Run(gns, func() (err error) {
		fd, err = openTun("vm0", unix.IFF_TAP|unix.IFF_NO_PI)
		return err
	}))
	must(t, "nonblocking tap", unix.SetNonblock(fd, true))
	vmTap := os.NewFile(uintptr(fd), "vm0")
	t.Cleanup(func() { vmTap.Close() })
	h := g.handle(t)
	for _, step := range []func() error{
		func() error { return linkDo(h, "lo", h.LinkSetUp) },
		func() error {
			return linkDo(h, "vm0", func(l netlink.Link) error { return h.LinkSetHardwareAddr(l, e.podMAC) })
		},
		func() error { return linkDo(h, "vm0", func(l netlink.Link) error { return h.LinkSetMTU(l, podMTU) }) },
		func() error {
			addr, _ := netlink.ParseAddr(e.prefix + ".5/24")
			return linkDo(h, "vm0", func(l netlink.Link) error { return h.AddrAdd(l, addr) })
		},
		func() error { return linkDo(h, "vm0", h.LinkSetUp) },
		func() error {
			return linkDo(h, "vm0", func(l netlink.Link) error {
				return h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: e.gw})
			})
		},
	} {
		must(t, "configure the guest", step())
	}
	go pump(podTap, vmTap)
	go pump(vmTap, podTap)
	return gns
}

func linkDo(h *netlink.Handle, name string, fn func(netlink.Link) error) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	return fn(l)
}

// pump copies frames from src to dst until either is closed.
func pump(dst, src *os.File) {
	buf := make([]byte, 65536)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// listenIn listens on TCP addr inside netns ns and echoes one line per
// connection; it reports each accepted connection on the channel.
func listenIn(t *testing.T, ns, addr string) <-chan struct{} {
	var ln net.Listener
	must(t, "listen in "+ns, Run(ns, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte("echo " + line))
			}()
		}
	}()
	return accepted
}

// TestLocalhostReachesTheVM: what the container runtime's port-forward
// does — dial 127.0.0.1:PORT in the pod netns — reaches PORT in the VM,
// both ways; the VM cannot open a connection into the pod netns by the
// resolver address the replies use.
func TestLocalhostReachesTheVM(t *testing.T) {
	resolver := netip.MustParseAddr("169.254.53.53")
	e, tapFile := attached(t, WithResolver(resolver))
	gns := e.guest(t, tapFile)
	listenIn(t, gns, ":8080")
	var reply string
	must(t, "port-forward into the VM", Run(e.ns, func() error {
		c, err := net.DialTimeout("tcp4", "127.0.0.1:8080", 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		must(t, "deadline", c.SetDeadline(time.Now().Add(5*time.Second)))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		reply, err = bufio.NewReader(c).ReadString('\n')
		return err
	}))
	if reply != "echo ping\n" {
		t.Fatalf("the VM answered %q, want %q", reply, "echo ping\n")
	}
	inPod := listenIn(t, e.ns, ":9090")
	err := Run(gns, func() error {
		c, err := net.DialTimeout("tcp4", resolver.String()+":9090", time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	select {
	case <-inPod:
		t.Fatal("the VM opened a connection into the pod netns")
	default:
	}
	if err == nil {
		t.Fatal("the VM's connection to the resolver address on 9090 succeeded")
	}
}

// TestVolumePortReachesThePodNetns: the VM's NFS to the resolver address
// on VolumePort reaches the volume server's listener in its pod netns (a
// kernel stack as the guest), and that port only: 2050 stays closed.
func TestVolumePortReachesThePodNetns(t *testing.T) {
	resolver := netip.MustParseAddr("169.254.53.53")
	e, tapFile := attached(t, WithResolver(resolver))
	gns := e.guest(t, tapFile)
	served := listenIn(t, e.ns, fmt.Sprintf(":%d", VolumePort))
	other := listenIn(t, e.ns, fmt.Sprintf(":%d", VolumePort+1))
	dial := func(port int) error {
		return Run(gns, func() error {
			c, err := net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", resolver, port), 2*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	must(t, "the VM's connection to the volume server", dial(VolumePort))
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("the volume server's listener accepted nothing")
	}
	if err := dial(VolumePort + 1); err == nil {
		t.Fatalf("the VM opened a connection to port %d of the pod netns", VolumePort+1)
	}
	select {
	case <-other:
		t.Fatalf("port %d of the pod netns accepted the VM", VolumePort+1)
	default:
	}
}

// TestTunnelTakesTheVMsTCP: with Policy.Tunnel every connection the VM
// opens reaches the pod netns's tunnel port, which reads where it was
// going; without it the same connection does not.
func TestTunnelTakesTheVMsTCP(t *testing.T) {
	resolver := netip.MustParseAddr("169.254.53.53")
	e, tapFile := attached(t, WithResolver(resolver))
	gns := e.guest(t, tapFile)
	var ln net.Listener
	must(t, "listen", Run(e.ns, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", resolver, TunnelPort))
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	got := make(chan netip.AddrPort, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dst, err := OriginalDst(c.(*net.TCPConn))
			if err != nil {
				t.Errorf("OriginalDst: %v", err)
			}
			got <- dst
			c.Close()
		}
	}()
	f, err := OpenFilter(e.ns)
	must(t, "OpenFilter", err)
	t.Cleanup(func() { f.Close() })
	dial := func() error {
		return Run(gns, func() error {
			c, err := net.DialTimeout("tcp4", "198.51.100.77:8443", 2*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	host := netip.PrefixFrom(netip.MustParseAddr(e.gw.String()), 32)
	must(t, "tunnel on", f.Update(Policy{Tunnel: true, IngressFrom: []netip.Prefix{host}}))
	// A connection into the VM is not the tunnel's: its replies pass.
	listenIn(t, gns, ":8080")
	c, err := net.DialTimeout("tcp4", e.prefix+".5:8080", 5*time.Second)
	must(t, "a connection into the VM with the tunnel on", err)
	must(t, "deadline", c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Write([]byte("ping\n"))
	must(t, "write", err)
	if reply, err := bufio.NewReader(c).ReadString('\n'); err != nil || reply != "echo ping\n" {
		t.Fatalf("the VM answered %q, %v", reply, err)
	}
	c.Close()
	must(t, "the VM's connection into the tunnel", dial())
	select {
	case dst := <-got:
		if dst.String() != "198.51.100.77:8443" {
			t.Fatalf("original destination %s", dst)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the tunnel accepted nothing")
	}
	must(t, "tunnel off", f.Update(Policy{}))
	if err := dial(); err == nil { // out to the pod network, where nothing answers
		t.Fatal("without the tunnel the VM's connection was accepted")
	}
	select { // the dial has ended: a redirect would have been accepted by now
	case dst := <-got:
		t.Fatalf("without the tunnel the VM's connection to %s reached it", dst)
	default:
	}
}

package network

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandlot-dev/sandlot/internal/poll"
	"github.com/sandlot-dev/sandlot/test/inet"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// frameScript writes UDP frames to the test internet's counter straight
// onto the VM's eth0 (AF_PACKET, as root), to the gateway's MAC: twice
// each a forged source IP, a forged source MAC and its own identity (last,
// so the frames before it had every chance to arrive first). Arguments:
// the counter's IP and port, the forged IP, the forged MAC (hex), a tag.
const frameScript = `
import socket, struct, sys, time
dst, port, fake_ip, fake_mac, tag = sys.argv[1:6]
def csum(b):
    s = sum(struct.unpack("!10H", b))
    s = (s & 0xffff) + (s >> 16)
    s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def gateway():
    for l in open("/proc/net/route").read().splitlines()[1:]:
        f = l.split()
        if f[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<I", int(f[2], 16)))
def mac_of(ip):
    for l in open("/proc/net/arp").read().splitlines()[1:]:
        f = l.split()
        if f[0] == ip and f[3] != "00:00:00:00:00:00":
            return bytes.fromhex(f[3].replace(":", ""))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.connect((dst, 9998))
own_ip, gw = u.getsockname()[0], gateway()
end = time.time() + 5
while mac_of(gw) is None and time.time() < end:
    u.send(b"arp")
    time.sleep(0.2)
gw_mac = mac_of(gw)
if gw_mac is None:
    print("no ARP entry for the gateway", gw)
    sys.exit(1)
own_mac = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
def frame(src_mac, src_ip, payload):
    udp = struct.pack("!HHHH", 40000, int(port), 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton(src_ip), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return gw_mac + src_mac + b"\x08\x00" + ip + udp
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
n = 0
for i in (1, 2):
    for kind, mac, ip in (("spoof-ip", own_mac, fake_ip), ("spoof-mac", bytes.fromhex(fake_mac), own_ip), ("genuine", own_mac, own_ip)):
        s.send(frame(mac, ip, ("%s %s-%d" % (tag, kind, i)).encode()))
        n += 1
print("sent", n)
`

// TestSpoofedFramesStayIn: of the frames a VM writes onto its wire, those
// with a forged source IP (a neighbour's on the pod network) or a forged
// source MAC never reach the test internet; its own arrive.
func TestSpoofedFramesStayIn(t *testing.T) {
	k := sbxtest.Client(t, c)
	sbxtest.Template(t, k, tpl)
	s := sbxtest.Create(t, k, tpl, "net-spoof")["net-spoof"]
	pod := s.Status.PodIP
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	cmd := strings.Join([]string{"python3 -c", shq(frameScript), inet.InetSide, strconv.Itoa(inet.UDPPort),
		neighbour(t, pod), "02534c000001", tag, "2>&1"}, " ")
	if out := sbxtest.EnvdRun(t, k, s, cmd); !strings.Contains(out, "sent 6") {
		t.Fatalf("raw frames from %s: %q", s.Name, out)
	}
	var got []inet.Datagram
	poll.Eventually(t, 30*time.Second, "the VM's own last frame at the counter", func() error {
		got = tnet.Datagrams(tag)
		for _, d := range got {
			if strings.HasSuffix(d.Payload, " genuine-2") {
				return nil
			}
		}
		return fmt.Errorf("received %+v", got)
	})
	genuine := 0
	for _, d := range got {
		if !strings.Contains(d.Payload, " genuine-") {
			t.Fatalf("a forged frame left the VM: %q from %s", d.Payload, d.From)
		}
		if d.From != net.JoinHostPort(pod, "40000") {
			t.Fatalf("the VM's own frame %q came from %s, want %s:40000", d.Payload, d.From, pod)
		}
		genuine++
	}
	if genuine != 2 {
		t.Fatalf("%d of the VM's 2 own frames arrived: %+v", genuine, got)
	}
}

// neighbour is another address on the pod's /24: a source the host would
// route back to the pod network, so only the filter stops it.
func neighbour(t *testing.T, pod string) string {
	t.Helper()
	ip := net.ParseIP(pod).To4()
	if ip == nil {
		t.Fatalf("pod IP %q", pod)
	}
	n := append(net.IP(nil), ip...)
	n[3] = 250
	if n.Equal(ip) {
		n[3] = 251
	}
	return n.String()
}

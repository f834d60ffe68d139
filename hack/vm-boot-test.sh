#!/usr/bin/env bash
# vm-boot-test.sh [busybox|debian]
# Cold-boots the assets of hack/vm-assets.sh once (microvm; TCG unless
# SANDLOT_ACCEL=kvm) with a fresh writable layer, and checks that:
#   1. the agent serves (console: "serving addr=:49983"), timed from launch;
#   2. the control channel answers ping and takes a network identity
#      (10.0.2.15/24 via 10.0.2.2, QEMU user networking's defaults);
#   3. GET /health through the hostfwd port answers 204;
#   4. / in the guest is the overlay of the base disk and the layer (a
#      process started over the control channel reads /proc/mounts).
# Needs qemu-system-x86_64, curl and python3 (the control-channel client).
# KEEP=1 keeps the run directory (console.log, cmdline); VM_QUIET=1 adds
# "quiet" (fewer kernel lines on the emulated serial port: a faster boot).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
ASSETS="$CACHE/vm"
which_rootfs="${1:-busybox}"
ACCEL="${SANDLOT_ACCEL:-tcg}"
MEM="${VM_MEM:-512M}"
TIMEOUT="${VM_TIMEOUT:-60}"

log() { printf '[vm-boot-test %s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "FAIL: $*"
	exit 1
}
for t in qemu-system-x86_64 curl python3; do command -v "$t" >/dev/null || die "$t not found"; done
[[ -f "$ASSETS/current.env" ]] || die "no $ASSETS/current.env: run make vm-assets"
# shellcheck disable=SC1091
source "$ASSETS/current.env"
case "$which_rootfs" in
busybox) BASE="${SANDLOT_VM_BASE_BUSYBOX:-}" ;;
debian) BASE="${SANDLOT_VM_BASE_DEBIAN:-}" ;;
*) die "usage: $0 [busybox|debian]" ;;
esac
[[ -n "$BASE" && -f "$BASE" ]] || die "no $which_rootfs base disk: run hack/vm-assets.sh"

RUN="$(mktemp -d "${TMPDIR:-/tmp}/sandlot-boot.XXXXXX")"
QPID=""
cleanup() {
	local rc=$?
	if [[ -n "$QPID" ]] && kill -0 "$QPID" 2>/dev/null; then
		kill "$QPID" 2>/dev/null || true
		wait "$QPID" 2>/dev/null || true
	fi
	if ((rc != 0)) && [[ -f "$RUN/console.log" ]]; then
		log "console.log (last 40 lines):"
		tail -n 40 "$RUN/console.log" >&2
	fi
	if [[ "${KEEP:-0}" == 1 ]]; then log "kept $RUN"; else rm -rf "$RUN"; fi
	exit "$rc"
}
trap cleanup EXIT

"$REPO/hack/vm-layer.sh" "$RUN/layer.ext4" 256 >/dev/null

port=""
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 20000))
	if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
		port=$p
		break
	fi
done
[[ -n "$port" ]] || die "no free port"

if [[ "$ACCEL" == kvm ]]; then
	machine="microvm,pit=off,pic=off,rtc=on"
	cpu="host,-arch-capabilities"
	timing=""
else
	machine="microvm,pit=on,pic=on,rtc=on"
	cpu="max"
	# TCG on microvm: no PIT channel 2 gate and no HPET, so skip the delay-loop calibration.
	timing="tsc_early_khz=2000000 lpj=8000000 no_timer_check tsc=reliable"
fi
append="console=ttyS0${VM_QUIET:+ quiet} panic=-1 $timing i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd"
append="$append SANDLOT_BASE=/dev/vda SANDLOT_LAYER=/dev/vdb SANDLOT_MODULES=$SANDLOT_VM_MODULES"
# The agent finds its control port by name (sandlot.control) in sysfs;
# VM_CONTROL=<device> passes SANDLOT_CONTROL to override that. (Agents
# before that lookup need VM_CONTROL=/dev/vport2p1: vport<virtio index>p<port>,
# the serial device being the third virtio device below.)
control="${VM_CONTROL:-}"
[[ -z "$control" ]] || append="$append SANDLOT_CONTROL=$control"
# shellcheck disable=SC2054 # the commas are QEMU's
cmd=(qemu-system-x86_64 -name "sandlot-boot-test" -nodefaults -no-user-config -display none
	-m "$MEM" -smp 1 -accel "$ACCEL" -machine "$machine" -cpu "$cpu"
	-kernel "$SANDLOT_VM_KERNEL" -initrd "$SANDLOT_VM_INITRD" -append "$append"
	-drive "if=none,id=base,file=$BASE,format=raw,readonly=on" -device virtio-blk-device,drive=base
	-drive "if=none,id=layer,file=$RUN/layer.ext4,format=raw" -device virtio-blk-device,drive=layer
	-device virtio-serial-device -chardev "socket,id=ctl,path=$RUN/ctl.sock,server=on,wait=off"
	-device virtserialport,chardev=ctl,name=sandlot.control
	-netdev "user,id=n0,hostfwd=tcp:127.0.0.1:$port-:49983" -device virtio-net-device,netdev=n0
	-serial "file:$RUN/console.log" -no-reboot)
printf '%q ' "${cmd[@]}" >"$RUN/cmdline"
log "booting $which_rootfs ($ACCEL, $MEM): $BASE"
t0=$(date +%s%N)
"${cmd[@]}" >"$RUN/qemu.out" 2>&1 &
QPID=$!

ms() { echo $((($(date +%s%N) - t0) / 1000000)); }
deadline=$((SECONDS + TIMEOUT))
until grep -q 'serving addr=:49983' "$RUN/console.log" 2>/dev/null; do
	kill -0 "$QPID" 2>/dev/null || die "QEMU exited: $(cat "$RUN/qemu.out")"
	grep -q 'boot failed' "$RUN/console.log" 2>/dev/null && die "the guest's boot failed"
	((SECONDS < deadline)) || die "no 'serving addr=:49983' within $TIMEOUT s"
	sleep 0.02
done
serving_ms=$(ms)
log "agent serving $serving_ms ms after launch"

# Before the host pushes an identity eth0 has no address: hostfwd cannot reach it.
pre="$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://127.0.0.1:$port/health" || true)"
log "GET /health before setIdentity: ${pre:-000} (expected 000: the NIC has no address yet)"

# ctl MODE: a small client of the control channel (newline-delimited JSON):
# "identity" pings and pushes a network identity, "checks" runs processes.
ctl() {
	python3 - "$RUN/ctl.sock" "$1" <<'EOF'
import base64, json, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
def call(i, method, params=None):
    f.write(json.dumps({"id": i, "method": method, "params": params or {}}).encode() + b"\n")
    f.flush()
    while True:
        fr = json.loads(f.readline())
        if fr.get("id") == i and "event" not in fr:
            if fr.get("error"):
                raise SystemExit(f"{method}: {fr['error']}")
            return fr.get("result")
def run(i, args):
    pid = call(i, "start", {"args": args})["pid"]
    out = b""
    while True:
        fr = json.loads(f.readline())
        ev, p = fr.get("event"), fr.get("params") or {}
        if ev == "output" and p.get("pid") == pid:
            out += base64.b64decode(p.get("data") or "")
        elif ev == "exit" and p.get("pid") == pid:
            return out.decode(), p.get("status")
if sys.argv[2] == "identity":
    t = time.time()
    print("ping", json.dumps(call(1, "ping")), f"{(time.time()-t)*1000:.1f}ms")
    r = call(2, "setIdentity", {"hostname": "sbx-boot-test",
         "network": {"interface": "eth0", "address": "10.0.2.15/24", "gateway": "10.0.2.2"}})
    print("setIdentity", json.dumps(r))
else:
    out, _ = run(3, ["/bin/cat", "/proc/mounts"])
    print("mounts")
    sys.stdout.write(out)
    # The image's user; with python3, an import must not recompile the
    # stdlib (stale .pyc files would land in the writable layer).
    out, status = run(4, ["/bin/sh", "-c", "id user && ls -ld /home/user && if command -v python3 >/dev/null; then "
        "python3 -c 'import os, json, sys; print(sys.version.split()[0])' && "
        "echo pycache-in-layer: $(find /run/sandlot/rw/upper -name '*.pyc' | wc -l); fi"])
    print("userland status=%s" % status)
    sys.stdout.write(out)
EOF
}

t1=$(date +%s%N)
ctl identity >"$RUN/identity.out"
sed 's/^/  /' "$RUN/identity.out" >&2
grep -q '"network": true' "$RUN/identity.out" || die "setIdentity did not configure the network"
code="$(curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:$port/health" || true)"
[[ "$code" == 204 ]] || die "GET /health: $code"
log "GET /health: 204 ($((($(date +%s%N) - t1) / 1000000)) ms after connecting to the control channel, $(ms) ms after launch)"

ctl checks >"$RUN/control.out"
root="$(awk '$2 == "/" { print $1, $3, $4 }' <(sed -n '/^mounts$/,/^userland/p' "$RUN/control.out"))"
[[ "$root" == overlay\ overlay\ *lowerdir=/run/sandlot/base* ]] || die "/ is not the overlay: $root"
log "guest /: $root"
grep -E ' /run/sandlot/(base|rw) ' "$RUN/control.out" | sed 's/^/  /' >&2 || true
grep -E 'EXT4-fs \(vd[ab]\)' "$RUN/console.log" | sed 's/^/  console: /' >&2 || true
sed -n '/^userland/,$p' "$RUN/control.out" | sed 's/^/  /' >&2
grep -q '^userland status=0' "$RUN/control.out" || die "userland check failed"
if grep -q '^pycache-in-layer:' "$RUN/control.out"; then
	grep -q '^pycache-in-layer: 0$' "$RUN/control.out" || die "python3 rewrote .pyc files into the layer (stale .pyc in the base)"
fi
log "OK: $which_rootfs booted, switched root and served (launch -> serving ${serving_ms} ms)"
echo "kernel command line: $append"

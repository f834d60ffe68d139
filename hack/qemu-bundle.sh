#!/usr/bin/env bash
# Builds the QEMU the agent image ships (chart value node.qemu empty): this
# machine's Debian qemu-system-x86 build, made relocatable — the binary, every
# library it links (glibc and its loader included, so it runs on any node
# distribution), the TCG accelerator module and the x86 firmware, laid out as
# a prefix QEMU relocates itself to (bin/, lib/, lib/<triplet>/qemu/,
# share/qemu/). The agent's install step copies it onto each node, as it
# copies the shim, so every node of a release runs the same QEMU (the way
# kata-deploy ships its hypervisor); its loader path is written then (the
# binary's PT_INTERP is a placeholder padded to leave room for it).
#
# Into ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/qemu/<Debian version>/, skipped
# when that exists; prints the directory on its last line of stdout.
# Needs qemu-system-x86 and patchelf (hack/deps.sh).
set -euo pipefail

CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
BIN=/usr/bin/qemu-system-x86_64
TRIPLET=x86_64-linux-gnu
MODULE=/usr/lib/$TRIPLET/qemu/accel-tcg-x86_64.so
# What microvm with -kernel loads (bios-microvm.bin, the linuxboot/pvh option
# ROMs: bios-microvm.bin is qboot) and the x86 option ROMs, under 100 KiB.
FIRMWARE=(bios-microvm.bin qboot.rom linuxboot.bin linuxboot_dma.bin pvh.bin
	multiboot.bin multiboot_dma.bin kvmvapic.bin)

log() { printf '[qemu-bundle %s] %s\n' "$(date +%T)" "$*" >&2; }

for tool in "$BIN" patchelf dpkg-query; do
	command -v "$tool" >/dev/null || { log "$tool not found: run hack/deps.sh (qemu-system-x86, patchelf)"; exit 1; }
done
DEB_VERSION=$(dpkg-query -W -f '${Version}' qemu-system-x86)
KEY=$(tr -c 'A-Za-z0-9.\n' '-' <<<"$DEB_VERSION")
OUT="$CACHE/qemu/$KEY"
if [[ -f "$OUT/sandlot-qemu.json" ]]; then
	log "QEMU $DEB_VERSION present"
	echo "$OUT"
	exit 0
fi

log "QEMU $DEB_VERSION: bundling $BIN with its libraries and firmware"
mkdir -p "$CACHE/qemu"
TMP=$(mktemp -d "$CACHE/qemu/.build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin" "$TMP/lib/$TRIPLET/qemu" "$TMP/share/qemu"
install -m 0755 "$BIN" "$TMP/bin/"
install -m 0644 "$MODULE" "$TMP/lib/$TRIPLET/qemu/"
# Every library ldd resolves, and the loader the binary names.
libs="$(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $3}') $(patchelf --print-interpreter "$BIN")"
packages=qemu-system-x86
for lib in $libs; do
	install -m 0755 "$(readlink -f "$lib")" "$TMP/lib/$(basename "$lib")"
	# dpkg knows a library by the path its package lists (merged /usr: either).
	pkg=$({ dpkg-query -S "$lib" || dpkg-query -S "$(readlink -f "$lib")"; } 2>/dev/null | head -1 | cut -d: -f1) || true
	[[ -n "$pkg" ]] && packages+=" $pkg"
done
for fw in "${FIRMWARE[@]}"; do
	install -m 0644 "$(readlink -f "/usr/share/qemu/$fw")" "$TMP/share/qemu/$fw"
done
packages+=" qemu-system-common qemu-system-data"

# The loader's path is written by the install step (nodeagent/install): a
# placeholder of 200 slashes before /opt/sandlot/qemu/lib/ld-linux-x86-64.so.2
# (the path a Dockerfile-built image would install to) leaves it the room.
pad=$(printf '/%.0s' $(seq 1 200))
patchelf --set-interpreter "${pad}opt/sandlot/qemu/lib/ld-linux-x86-64.so.2" \
	--force-rpath --set-rpath '$ORIGIN/../lib' "$TMP/bin/qemu-system-x86_64"
# The bundle alone runs it (its loader, its libraries): or it is no bundle.
QEMU_VERSION=$("$TMP/lib/ld-linux-x86-64.so.2" --library-path "$TMP/lib" "$TMP/bin/qemu-system-x86_64" --version |
	sed -n 's/^QEMU emulator version \([^ ]*\).*/\1/p')
[[ -n "$QEMU_VERSION" ]] || { log "the bundle in $TMP does not run"; exit 1; }

{
	printf '{\n  "qemu": "%s",\n  "binary": "bin/qemu-system-x86_64",\n  "loader": "lib/ld-linux-x86-64.so.2",\n  "debian": {' "$QEMU_VERSION"
	sep=""
	for pkg in $(tr ' ' '\n' <<<"$packages" | sort -u); do
		printf '%s\n    "%s": "%s"' "$sep" "$pkg" "$(dpkg-query -W -f '${Version}' "$pkg")"
		sep=","
	done
	printf '\n  }\n}\n'
} >"$TMP/sandlot-qemu.json"
chmod 0755 "$TMP"
mv "$TMP" "$OUT"
trap - EXIT
log "QEMU $QEMU_VERSION ($DEB_VERSION): $(du -sh "$OUT" | cut -f1) in $OUT"
echo "$OUT"

#!/usr/bin/env bash
# Builds what a sandlot microVM boots, into
#   ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/vm/
#     kernel/<kver>/vmlinux              uncompressed PVH ELF (for -machine microvm)
#     kernel/<kver>/modules/*.ko         the guest's virtio/overlay modules, uncompressed
#     kernel/<kver>/modules.order        their paths (relative to kernel/<kver>/), load order
#     kernel/<kver>/package              the Debian package and version they came from
#     kernel/<kver>/modules.want         the module list asked for (SANDLOT_GUEST_MODULES)
#     kernel/current -> <kver>
#     initramfs/<key>/initramfs.cpio.gz  /init = sandlot-guest, /modules/*.ko (reproducible)
#     initramfs/<key>/modules.env        the SANDLOT_MODULES value (':'-separated, load order)
#     initramfs/<key>/manifest           what <key> (a sha256) is the hash of: agent + modules
#     initramfs/current -> <key>
#     rootfs/debian-bookworm/            debootstrap.tar.zst (cached tree), base.ext4 (+ .sha256),
#                                        image.tar: the same tree as an OCI archive for
#                                        `ctr -n k8s.io images import` (+ image.digest)
#     rootfs/busybox/                    base.ext4 (+ .sha256): busybox-static, a few MiB
#     rootfs/code-interpreter-bookworm/  tree.tar.zst (the Debian tree + the data stack, pip,
#                                        node, TypeScript), image.tar (+ image.digest)
#     current.env                        KEY=value lines naming the current assets
# skipping everything that already exists (each step records what it was
# built from and rebuilds when that changed). Progress goes to stderr; the
# last line on stdout is the asset directory.
#
#   hack/vm-assets.sh                 # everything (as root: debootstrap, chroot, chown)
#   hack/vm-assets.sh kernel initramfs busybox debian interpreter   # only these steps
#   hack/vm-assets.sh check           # self-test: rebuild the initramfs, both disks and
#                                     # the image into a temp dir, compare sha256s, fsck, PVH note
#
# Environment: SANDLOT_CACHE; SANDLOT_KERNEL_PKG (default linux-image-cloud-amd64);
# SANDLOT_GUEST_MODULES (module names; dependencies are added);
# SANDLOT_DEBIAN_MIRROR (default: the first bookworm URI of the apt sources).
# Network: Debian mirrors only (apt-get download, debootstrap); the agent and
# hack/ociimage are built from the Go module cache/proxy like the rest of the repo.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
ASSETS="$CACHE/vm"
KERNEL_PKG="${SANDLOT_KERNEL_PKG:-linux-image-cloud-amd64}"
# nfsv3: E2B volumes, which the guest mounts from its shim's NFS server.
GUEST_MODULES="${SANDLOT_GUEST_MODULES:-virtio_mmio virtio_blk virtio_net virtio_console virtio_rng overlay erofs nfsv3}"
DEBIAN_SUITE=bookworm
# What E2B's base template has besides: sudo (the user may use it), curl,
# git and the CA certificates they verify with.
DEBIAN_INCLUDE=python3,iproute2,procps,sudo,curl,git,ca-certificates
# Bump when what the image steps do to a tree, or how make_ext4 formats
# it, changes (forces a rebuild of the base disks).
DEBIAN_IMAGE_RECIPE=3
BUSYBOX_IMAGE_RECIPE=2
# The Debian tree as a container image, for clusters without a registry: a
# tag other than latest, so kubelet's default pull policy is IfNotPresent.
DEBIAN_OCI_REF=docker.io/library/sandlot-python:bookworm
# The image's own process says it is up (kubectl logs shows it), then waits:
# envd and the code interpreter are the guest agent's, not the image's.
DEBIAN_OCI_CONFIG=(-cmd /bin/sh -cmd -c -cmd 'echo "sandlot sandbox $(hostname) ready"; exec sleep infinity'
	-env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -workdir /)
# The code-interpreter image (E2B's code-interpreter-v1): the Debian tree
# plus the data stack a notebook user expects (numpy, pandas, matplotlib),
# pip for %pip, and node with TypeScript for the js/ts contexts. Its own
# image, so the many tests that boot the small one stay small.
INTERP_PACKAGES="python3-numpy python3-pandas python3-matplotlib python3-pip nodejs node-typescript"
INTERP_OCI_REF=docker.io/library/sandlot-code-interpreter:bookworm

log() { printf '[vm-assets %s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/sandlot-vm.XXXXXX")"
PARTIAL=() # cache entries being written by this run; removed on exit unless renamed into place
cleanup() {
	local rc=$?
	# Nothing may stay mounted below WORK (a failed debootstrap leaves
	# proc/sys mounted in its target) before it is removed.
	local m
	while read -r m; do
		if [[ "$m" == "$WORK"/* ]]; then umount -l "$m" 2>/dev/null || true; fi
	done < <(findmnt -rn -o TARGET 2>/dev/null | sort -r)
	if findmnt -rn -o TARGET 2>/dev/null | grep -q "^$WORK/"; then
		log "WARNING: mounts remain below $WORK; not removing it"
	else
		rm -rf "$WORK"
	fi
	for m in "${PARTIAL[@]}"; do rm -rf "$m"; done
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

need() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null || die "$t not found (Debian: apt-get install qemu-utils cpio busybox-static debootstrap e2fsprogs binutils lz4 xz-utils zstd)"
	done
}

need_root() {
	[[ $EUID -eq 0 ]] || die "$1 needs root"
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# uuid_for NAME: a fixed, name-derived UUID (reproducible images, distinct per image).
uuid_for() {
	local h
	h="$(printf 'sandlot:%s' "$1" | sha256sum | cut -c1-32)"
	printf '%s-%s-5%s-8%s-%s\n' "${h:0:8}" "${h:8:4}" "${h:13:3}" "${h:17:3}" "${h:20:12}"
}

# ---------------------------------------------------------------- kernel

# resolve_kernel: sets KPKG, KPKG_VERSION, KVER from the metapackage's
# candidate; fails when apt does not know it.
resolve_kernel() {
	local dep
	dep="$(apt-cache show --no-all-versions "$KERNEL_PKG" 2>/dev/null | sed -n 's/^Depends: //p' | head -n1)" || true
	[[ -n "$dep" ]] || return 1
	# e.g. "linux-image-6.1.0-57-cloud-amd64 (= 6.1.192-3)"
	KPKG="$(tr ',' '\n' <<<"$dep" | grep -o 'linux-image-[^ ]*' | head -n1)" || true
	[[ -n "$KPKG" ]] || die "cannot find the versioned image package in '$dep'"
	KPKG_VERSION="$(sed -n "s/.*${KPKG} (= \([^)]*\)).*/\1/p" <<<"$dep")"
	if [[ -z "$KPKG_VERSION" ]]; then
		KPKG_VERSION="$(apt-cache show --no-all-versions "$KPKG" | sed -n 's/^Version: //p' | head -n1)"
	fi
	KVER="${KPKG#linux-image-}"
}

# valid_vmlinux FILE: an x86-64 ELF whose loadable segments are all in the
# file (a truncated decompression fails this).
valid_vmlinux() {
	local f="$1" size need=0 typ off fsz rest
	readelf -h "$f" >/dev/null 2>&1 || return 1
	readelf -h "$f" | grep -q 'Machine:.*X86-64' || return 1
	size="$(stat -c %s "$f")"
	while read -r typ off _ _ fsz rest; do
		[[ "$typ" == LOAD ]] || continue
		((off + fsz > need)) && need=$((off + fsz))
	done < <(readelf -lW "$f" 2>/dev/null)
	((need > 0 && need <= size))
}

# extract_vmlinux IMAGE OUT: like the kernel's scripts/extract-vmlinux, find
# a compressed payload by its magic and decompress it until an ELF appears.
extract_vmlinux() {
	local img="$1" out="$2" f fmt magic cmd tool off missing=""
	if valid_vmlinux "$img"; then
		cp "$img" "$out"
		return 0
	fi
	local -a formats=(
		"gzip|\\x1f\\x8b\\x08|gzip -dc"
		"xz|\\xfd\\x37\\x7a\\x58\\x5a\\x00|xz -dc"
		"bzip2|BZh[1-9]\\x31\\x41\\x59\\x26\\x53\\x59|bzip2 -dc"
		"lzma|\\x5d\\x00\\x00\\x00|xz -dc --format=lzma"
		"lzo|\\x89\\x4c\\x5a\\x4f|lzop -dc"
		"lz4|\\x02\\x21\\x4c\\x18|lz4 -dc"
		"zstd|\\x28\\xb5\\x2f\\xfd|zstd -dc"
	)
	for f in "${formats[@]}"; do
		IFS='|' read -r fmt magic cmd <<<"$f"
		tool="${cmd%% *}"
		while read -r off; do
			[[ -n "$off" ]] || continue
			if ! command -v "$tool" >/dev/null; then
				missing+=" $tool($fmt)"
				break
			fi
			# Trailing bytes after the payload make the decompressor complain:
			# the exit status is meaningless, the ELF check decides.
			tail -c "+$((off + 1))" "$img" | $cmd >"$out" 2>/dev/null || true
			if valid_vmlinux "$out"; then
				log "  vmlinux: $fmt payload at offset $off"
				return 0
			fi
		done < <(LC_ALL=C grep -obUaP "$magic" "$img" | cut -d: -f1 || true)
	done
	rm -f "$out"
	[[ -z "$missing" ]] || log "  possible payloads not tried, tools missing:$missing"
	return 1
}

has_pvh_note() {
	readelf -n "$1" | grep -Eq 'Xen.*(0x00000012|PHYS32_ENTRY)'
}

# module_deps FILE: the module names FILE depends on (its .modinfo
# "depends=", which depmod's modules.dep is made from).
module_deps() {
	objcopy -O binary --only-section=.modinfo "$1" /dev/stdout 2>/dev/null | tr '\0' '\n' |
		sed -n 's/^depends=//p' | tr ',' '\n' | sed '/^$/d' | tr '-' '_'
}

decompress_module() {
	case "$1" in
	*.ko) cp "$1" "$2" ;;
	*.ko.xz) xz -dc "$1" >"$2" ;;
	*.ko.zst) zstd -qdc "$1" >"$2" ;;
	*.ko.gz) gzip -dc "$1" >"$2" ;;
	*) die "unknown module format: $1" ;;
	esac
}

build_kernel() {
	need apt-get apt-cache dpkg-deb readelf objcopy
	mkdir -p "$ASSETS/kernel"
	if ! resolve_kernel; then
		if [[ -f "$ASSETS/kernel/current/vmlinux" && -f "$ASSETS/kernel/current/modules.order" ]]; then
			log "kernel: apt does not know $KERNEL_PKG (no apt lists?); keeping kernel/current -> $(readlink "$ASSETS/kernel/current")"
			return
		fi
		need_root "apt-get update ($KERNEL_PKG is unknown to apt)"
		log "apt-get update ($KERNEL_PKG is unknown to apt)"
		apt-get update -qq >&2
		resolve_kernel || die "apt knows no $KERNEL_PKG"
	fi
	local dir="$ASSETS/kernel/$KVER"
	# modules.want: the module list the directory was made for (a changed
	# list rebuilds it).
	if [[ -f "$dir/vmlinux" && -f "$dir/modules.order" && -f "$dir/package" &&
		"$(cat "$dir/modules.want" 2>/dev/null)" == "$GUEST_MODULES" ]]; then
		local have
		have="$(cat "$dir/package")"
		if [[ "$have" != "$KPKG $KPKG_VERSION" ]]; then
			log "kernel $KVER present (from $have; apt now has $KPKG_VERSION: delete $dir to refresh)"
		else
			log "kernel $KVER present"
		fi
		ln -sfn "$KVER" "$ASSETS/kernel/current"
		return
	fi
	log "kernel: $KERNEL_PKG -> $KPKG $KPKG_VERSION: apt-get download"
	local w="$WORK/kernel"
	mkdir -p "$w"
	(cd "$w" && apt-get download -q -o APT::Sandbox::User=root "$KPKG=$KPKG_VERSION" >&2)
	local deb
	deb="$(ls "$w"/*.deb)"
	dpkg-deb -x "$deb" "$w/x"
	local vmlinuz="$w/x/boot/vmlinuz-$KVER" mods="$w/x/lib/modules/$KVER"
	[[ -f "$vmlinuz" && -d "$mods" ]] || die "$deb has no boot/vmlinuz-$KVER or lib/modules/$KVER"

	local tmp="$ASSETS/kernel/.$KVER.tmp.$$"
	PARTIAL+=("$tmp")
	rm -rf "$tmp"
	mkdir -p "$tmp/modules"
	log "kernel: extracting vmlinux from $(basename "$vmlinuz")"
	extract_vmlinux "$vmlinuz" "$tmp/vmlinux" || die "no vmlinux found in $vmlinuz"
	has_pvh_note "$tmp/vmlinux" || die "vmlinux has no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY): microvm cannot boot it"
	log "  vmlinux: $(stat -c %s "$tmp/vmlinux") bytes, PVH note present"
	cp "$w/x/boot/config-$KVER" "$tmp/config"

	# Modules: name -> file (names use '_'; Debian may compress them).
	local -A file_of=() builtin=() done_=()
	local f n
	while read -r f; do
		n="$(basename "$f")"
		n="${n%%.ko*}"
		file_of["${n//-/_}"]="$f"
	done < <(find "$mods/kernel" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz')
	if [[ -f "$mods/modules.builtin" ]]; then
		while read -r f; do
			n="$(basename "$f")"
			n="${n%%.ko*}"
			builtin["${n//-/_}"]=1
		done <"$mods/modules.builtin"
	fi
	local order=()
	visit() {
		local m="$1" d out
		[[ -n "${done_[$m]:-}" ]] && return 0
		done_[$m]=1
		if [[ -n "${builtin[$m]:-}" ]]; then
			log "  $m: built into the kernel"
			return 0
		fi
		[[ -n "${file_of[$m]:-}" ]] || die "module $m not in $KPKG"
		out="$tmp/modules/$(basename "${file_of[$m]%.ko*}").ko"
		decompress_module "${file_of[$m]}" "$out"
		for d in $(module_deps "$out"); do visit "$d"; done
		order+=("modules/$(basename "$out")")
	}
	for n in $GUEST_MODULES; do visit "${n//-/_}"; done
	printf '%s\n' "${order[@]}" >"$tmp/modules.order"
	echo "$KPKG $KPKG_VERSION" >"$tmp/package"
	echo "$GUEST_MODULES" >"$tmp/modules.want"
	log "  modules (load order): $(tr '\n' ' ' <"$tmp/modules.order")"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	ln -sfn "$KVER" "$ASSETS/kernel/current"
	log "kernel $KVER built"
}

# ------------------------------------------------------------- initramfs

build_initramfs() {
	need go cpio gzip
	local kdir="$ASSETS/kernel/current"
	[[ -f "$kdir/modules.order" ]] || die "no kernel in $ASSETS/kernel/current: build the kernel step first"
	kdir="$(cd "$kdir" && pwd -P)"
	local w="$WORK/initramfs"
	mkdir -p "$w"
	# The guest agent carries the release version (the chart's appVersion),
	# as every other binary does (make build).
	local version
	version="$(awk '/^appVersion:/ { gsub(/"/, "", $2); print $2 }' "$REPO/charts/sandlot/Chart.yaml")"
	log "initramfs: building sandlot-guest $version (CGO_ENABLED=0)"
	(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags="-s -w -X github.com/sandlot-dev/sandlot/internal/version.Version=$version" \
		-o "$w/sandlot-guest" ./cmd/sandlot-guest)
	local agent_sha m
	agent_sha="$(sha256 "$w/sandlot-guest")"
	# The key covers everything in the archive: a new agent or kernel
	# (modules) gives a new initramfs.
	{
		echo "agent $agent_sha sandlot-guest"
		echo "kernel $(basename "$kdir") $(cat "$kdir/package")"
		while read -r m; do echo "module $(sha256 "$kdir/$m") /$m"; done <"$kdir/modules.order"
	} >"$w/manifest"
	local key dir
	key="$(sha256 "$w/manifest")"
	dir="$ASSETS/initramfs/$key"
	mkdir -p "$ASSETS/initramfs"
	if [[ -f "$dir/initramfs.cpio.gz" && -f "$dir/modules.env" ]]; then
		log "initramfs $key present (agent ${agent_sha:0:12})"
		ln -sfn "$key" "$ASSETS/initramfs/current"
		return
	fi
	local tmp="$ASSETS/initramfs/.$key.tmp.$$"
	PARTIAL+=("$tmp")
	rm -rf "$tmp"
	mkdir -p "$tmp"
	make_cpio "$w/sandlot-guest" "$kdir" "$tmp/initramfs.cpio.gz"
	sed 's|^modules/|/modules/|' "$kdir/modules.order" | paste -sd: >"$tmp/modules.env"
	cp "$w/manifest" "$tmp/manifest"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	ln -sfn "$key" "$ASSETS/initramfs/current"
	log "initramfs $key built: $(stat -c %s "$dir/initramfs.cpio.gz") bytes, agent ${agent_sha:0:12}"
}

# make_cpio AGENT KERNELDIR OUT: a reproducible gzip'd newc archive.
make_cpio() {
	local agent="$1" kdir="$2" out="$3" s m
	s="$(mktemp -d "$WORK/cpio.XXXXXX")"
	mkdir -p "$s"/{dev,proc,sys,run,tmp,newroot,modules}
	install -m 0755 "$agent" "$s/init"
	while read -r m; do install -m 0644 "$kdir/$m" "$s/modules/"; done <"$kdir/modules.order"
	find "$s" -type d -exec chmod 0755 {} +
	chmod 1777 "$s/tmp"
	find "$s" -exec touch -h -d @0 {} +
	(cd "$s" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
		cpio -o -H newc -R 0:0 --reproducible --quiet) | gzip -n -9 >"$out"
}

# ----------------------------------------------------------------- ext4

# used_inodes IMAGE: the inode numbers in use (>= the first non-reserved
# one), read from dumpe2fs's per-group free inode ranges.
used_inodes() {
	dumpe2fs "$1" 2>/dev/null | awk '
		/^Inodes per group:/ { ipg = $4 }
		/^First inode:/ { first = $3 }
		/^Group [0-9]+:/ { g = $2 + 0 }
		/^  Free inodes:/ {
			lo = g * ipg + 1; hi = (g + 1) * ipg
			delete free
			sub(/^  Free inodes: */, "")
			n = split($0, r, /, */)
			for (i = 1; i <= n; i++) {
				if (r[i] == "") continue
				if (split(r[i], ab, "-") == 1) ab[2] = ab[1]
				for (j = ab[1]; j <= ab[2]; j++) free[j] = 1
			}
			for (j = lo; j <= hi; j++) if (!(j in free) && j >= first) print j
		}'
}

# clamp_mtimes TREE EPOCH: what was created after EPOCH (by the image steps)
# gets EPOCH as its mtime, so the same recipe gives the same bytes.
clamp_mtimes() {
	find "$1" -newermt "@$2" -exec touch -h -d "@$2" {} +
}

# make_ext4 TREE OUT NAME EPOCH: a reproducible ext4 image of TREE (which
# this changes: mtimes after EPOCH are clamped to it). Same tree content ->
# same bytes: fixed UUID and hash seed, mke2fs clock = EPOCH, and the
# atimes/ctimes mke2fs copies from the host files (which no touch can fix)
# reset to EPOCH afterwards. No journal: the base is read-only.
make_ext4() {
	local tree="$1" out="$2" name="$3" epoch="$4" uuid seed
	uuid="$(uuid_for "base:$name")"
	seed="$(uuid_for "hash:$name")"
	clamp_mtimes "$tree" "$epoch"
	# Size: the content in 4 KiB blocks (apparent sizes, so the same tree
	# gives the same size anywhere), inode tables, 10 % + 16 MiB headroom.
	local blocks entries inodes mib
	read -r blocks entries < <(find "$tree" -printf '%y %s\n' | awk '
		$1 == "f" || $1 == "d" { b += int(($2 + 4095) / 4096) }
		$1 == "l" && $2 >= 60 { b += 1 }
		{ n++ } END { print b + 0, n + 0 }')
	inodes=$((entries + entries / 5 + 256))
	mib=$(((blocks * 4 * 11 / 10 + inodes / 4 + 16384 + 1023) / 1024))
	rm -f "$out"
	truncate -s "${mib}M" "$out"
	E2FSPROGS_FAKE_TIME="$epoch" mkfs.ext4 -q -F -T default -t ext4 -b 4096 -I 256 -N "$inodes" -m 0 \
		-O ^has_journal -U "$uuid" -E "hash_seed=$seed,root_owner=0:0,nodiscard" -L sandlot-base -d "$tree" "$out"
	local cmds="$WORK/debugfs.$$.cmds" ino
	used_inodes "$out" | while read -r ino; do
		printf 'sif <%s> atime @%s\nsif <%s> ctime @%s\nsif <%s> crtime @%s\n' "$ino" "$epoch" "$ino" "$epoch" "$ino" "$epoch"
	done >"$cmds"
	E2FSPROGS_FAKE_TIME="$epoch" debugfs -w -f "$cmds" "$out" >/dev/null 2>"$cmds.err" ||
		die "debugfs on $out: $(head -n3 "$cmds.err")"
	if grep -v '^debugfs ' "$cmds.err" | grep -q .; then die "debugfs on $out: $(grep -v '^debugfs ' "$cmds.err" | head -n3)"; fi
	e2fsck -fn "$out" >"$cmds.fsck" 2>&1 || die "e2fsck $out: $(tail -n5 "$cmds.fsck")"
	rm -f "$cmds" "$cmds.err" "$cmds.fsck"
	log "  $name: ${mib} MiB, $(wc -l < <(used_inodes "$out")) inodes, uuid $uuid"
}

# publish_image IMAGE DIR: IMAGE becomes DIR/base.ext4 with its sha256.
publish_image() {
	local img="$1" dir="$2" sum
	sum="$(sha256 "$img")"
	mv "$img" "$dir/base.ext4"
	echo "$sum  base.ext4" >"$dir/base.ext4.sha256"
	log "  sha256 $sum"
}

# --------------------------------------------------------------- busybox

busybox_recipe() {
	echo "recipe $BUSYBOX_IMAGE_RECIPE busybox-static $(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null || echo unknown) $(sha256 /bin/busybox)"
}

# busybox_tree DIR
busybox_tree() {
	local t="$1" p
	mkdir -p "$t"/{bin,sbin,usr/bin,usr/sbin,etc,dev,proc,sys,run,tmp,root,home/user,var/tmp}
	install -m 0755 /bin/busybox "$t/bin/busybox"
	while read -r p; do
		[[ -e "$t/$p" || -L "$t/$p" ]] || ln -s /bin/busybox "$t/$p"
	done < <(/bin/busybox --list-full | LC_ALL=C sort)
	printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' >"$t/etc/passwd"
	printf 'root:x:0:\nuser:x:1000:\n' >"$t/etc/group"
	printf 'root:*:::::::\nuser:*:::::::\n' >"$t/etc/shadow"
	printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$t/etc/hosts"
	echo sandbox >"$t/etc/hostname"
	chmod 0644 "$t/etc/passwd" "$t/etc/group" "$t/etc/hosts" "$t/etc/hostname"
	chmod 0640 "$t/etc/shadow"
	chmod 1777 "$t/tmp" "$t/var/tmp"
	chmod 0700 "$t/root"
	chown 1000:1000 "$t/home/user"
}

build_busybox() {
	need busybox mkfs.ext4 debugfs dumpe2fs e2fsck
	[[ -x /bin/busybox ]] || die "/bin/busybox missing (apt-get install busybox-static)"
	readelf -l /bin/busybox | grep -q INTERP && die "/bin/busybox is dynamically linked (install busybox-static)"
	local dir="$ASSETS/rootfs/busybox" recipe
	recipe="$(busybox_recipe)"
	if [[ -f "$dir/base.ext4" && -f "$dir/base.ext4.sha256" && "$(cat "$dir/recipe" 2>/dev/null)" == "$recipe" ]]; then
		log "rootfs busybox present"
		return
	fi
	need_root "the busybox rootfs (chown)"
	log "rootfs busybox: building"
	mkdir -p "$dir"
	local t="$WORK/busybox"
	busybox_tree "$t"
	local img="$dir/.base.ext4.tmp.$$"
	PARTIAL+=("$img")
	make_ext4 "$t" "$img" busybox "$(stat -c %Y /bin/busybox)"
	publish_image "$img" "$dir"
	echo "$recipe" >"$dir/recipe"
	log "rootfs busybox built"
}

# ---------------------------------------------------------------- debian

debian_mirror() {
	if [[ -n "${SANDLOT_DEBIAN_MIRROR:-}" ]]; then
		echo "$SANDLOT_DEBIAN_MIRROR"
		return
	fi
	local m f
	# deb822 .sources: the URIs of a stanza whose Suites has the suite itself.
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f "$f" ]] || continue
		m="$(awk -v s="$DEBIAN_SUITE" '
			BEGIN { RS = ""; FS = "\n" }
			{
				uris = ""; ok = 0; deb = 0
				for (i = 1; i <= NF; i++) {
					if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs: */, "", uris) }
					if ($i ~ /^Types:.*(^|[ :])deb( |$)/) deb = 1
					if ($i ~ /^Suites:/) { n = split($i, a, /[ \t]+/); for (j = 2; j <= n; j++) if (a[j] == s) ok = 1 }
				}
				if (ok && deb && uris != "") { split(uris, u, /[ \t]+/); print u[1]; exit }
			}' "$f")"
		[[ -n "$m" ]] && break
	done
	if [[ -z "$m" ]]; then
		m="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			awk -v s="$DEBIAN_SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++; if ($(i + 1) == s) { print $i; exit } }')"
	fi
	[[ -n "$m" ]] || die "no $DEBIAN_SUITE mirror in /etc/apt/sources.list(.d); set SANDLOT_DEBIAN_MIRROR"
	echo "$m"
}

# pack_tree TREE TAR: TREE as the zstd tarball TAR (owners, modes,
# xattrs and ACLs kept), written whole, then renamed into place.
pack_tree() {
	PARTIAL+=("$2.tmp.$$")
	tar -C "$1" --numeric-owner --xattrs --xattrs-include='*' --acls -I 'zstd -T0 -3 -q' -cf "$2.tmp.$$" .
	mv "$2.tmp.$$" "$2"
}

# unpack_tree TAR DIR: the tree pack_tree made, into DIR.
unpack_tree() {
	tar -C "$2" --numeric-owner --xattrs --xattrs-include='*' --acls -I zstd -xpf "$1"
}

debootstrap_recipe() {
	echo "debootstrap --variant=minbase --include=$DEBIAN_INCLUDE $DEBIAN_SUITE"
}

# debian_tarball: the debootstrap tree, cached as a tarball (the slow step).
debian_tarball() {
	local dir="$ASSETS/rootfs/debian-$DEBIAN_SUITE"
	local tar="$dir/debootstrap.tar.zst" recipe
	recipe="$(debootstrap_recipe)"
	if [[ -f "$tar" && -f "$dir/debootstrap.epoch" && "$(cat "$dir/debootstrap.recipe" 2>/dev/null)" == "$recipe" ]]; then
		log "debootstrap tree present ($(stat -c %s "$tar") bytes)"
		return
	fi
	need debootstrap zstd tar
	local mirror t epoch start
	mirror="$(debian_mirror)"
	t="$WORK/debootstrap"
	epoch="$(date +%s)"
	start=$SECONDS
	log "debootstrap $DEBIAN_SUITE from $mirror (about a minute)"
	if ! debootstrap --variant=minbase --include="$DEBIAN_INCLUDE" "$DEBIAN_SUITE" "$t" "$mirror" >"$WORK/debootstrap.log" 2>&1; then
		tail -n 20 "$WORK/debootstrap.log" >&2
		[[ -f "$t/debootstrap/debootstrap.log" ]] && tail -n 20 "$t/debootstrap/debootstrap.log" >&2
		die "debootstrap failed"
	fi
	log "  debootstrap done in $((SECONDS - start)) s ($(du -sm "$t" | cut -f1) MB)"
	mkdir -p "$dir"
	pack_tree "$t" "$tar"
	# Files created by the install are clamped to this time in the image;
	# files from packages keep theirs (so the .pyc files stay valid).
	echo "$epoch" >"$dir/debootstrap.epoch"
	echo "$recipe" >"$dir/debootstrap.recipe"
	rm -rf "$WORK/debootstrap"
	log "  cached as $tar ($(stat -c %s "$tar") bytes)"
}

# debian_tree DIR [TARBALL]: the cached debootstrap tree (or TARBALL, a tree
# made from it) plus the image's changes (its epoch is in debootstrap.epoch).
debian_tree() {
	local t="$1" dir="$ASSETS/rootfs/debian-$DEBIAN_SUITE" epoch
	local tarball="${2:-$dir/debootstrap.tar.zst}"
	epoch="$(cat "$dir/debootstrap.epoch")"
	mkdir -p "$t"
	unpack_tree "$tarball" "$t"
	# The sandbox user (E2B's "user"), as useradd makes it; SOURCE_DATE_EPOCH
	# fixes the password-change day in /etc/shadow.
	if ! grep -q '^user:' "$t/etc/passwd"; then
		SOURCE_DATE_EPOCH="$epoch" chroot "$t" /usr/sbin/useradd --create-home --uid 1000 --user-group \
			--shell /bin/bash user
	fi
	chmod 0755 "$t/home/user"
	# As on E2B: the sandbox user may sudo without a password.
	echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' >"$t/etc/sudoers.d/user"
	chmod 0440 "$t/etc/sudoers.d/user"
	# E2B's mcp-gateway template: the gateway Sandbox.create({ mcp }) runs.
	install -m 0755 "$MCP_GATEWAY" "$t/usr/local/bin/mcp-gateway"
	# Host-specific files debootstrap copied from this machine; the guest's
	# identity (hostname, network) comes from the host at run time.
	echo sandbox >"$t/etc/hostname"
	printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$t/etc/hosts"
	printf '# written at run time\n' >"$t/etc/resolv.conf"
	# Caches apt rebuilds anyway.
	rm -rf "$t"/var/lib/apt/lists/* "$t"/var/cache/apt/*.bin "$t"/var/cache/apt/archives/*.deb \
		"$t"/var/cache/debconf/*-old "$t"/var/lib/dpkg/*-old
	mkdir -p "$t/var/lib/apt/lists/partial"
	: >"$t/etc/machine-id" 2>/dev/null || true
}

debian_image_recipe() {
	local dir="$ASSETS/rootfs/debian-$DEBIAN_SUITE"
	echo "recipe $DEBIAN_IMAGE_RECIPE $(debootstrap_recipe) epoch $(cat "$dir/debootstrap.epoch") mcp-gateway $(mcp_gateway_sha)"
}

# build_mcp_gateway: cmd/mcp-gateway, built once per run (reproducibly:
# its sha256 keys the images, see mcp_gateway_sha); the Debian tree
# installs it. Call it as a command (errexit), before any recipe.
MCP_GATEWAY=""
build_mcp_gateway() {
	[[ -n "$MCP_GATEWAY" ]] && return
	need go
	local version
	version="$(awk '/^appVersion:/ { gsub(/"/, "", $2); print $2 }' "$REPO/charts/sandlot/Chart.yaml")"
	(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags="-s -w -X github.com/sandlot-dev/sandlot/internal/version.Version=$version" \
		-o "$WORK/mcp-gateway" ./cmd/mcp-gateway)
	MCP_GATEWAY="$WORK/mcp-gateway"
}

mcp_gateway_sha() {
	[[ -n "$MCP_GATEWAY" ]] || die "build_mcp_gateway first"
	sha256 "$MCP_GATEWAY"
}

build_debian() {
	need mkfs.ext4 debugfs dumpe2fs e2fsck tar zstd
	build_mcp_gateway
	local dir="$ASSETS/rootfs/debian-$DEBIAN_SUITE"
	if [[ ! -f "$dir/debootstrap.tar.zst" || ! -f "$dir/debootstrap.epoch" || "$(cat "$dir/debootstrap.recipe" 2>/dev/null)" != "$(debootstrap_recipe)" ]]; then
		need_root "debootstrap"
	fi
	debian_tarball
	build_debian_disk
	build_debian_oci
	rm -rf "$WORK/debian"
}

# debian_work_tree: WORK/debian, made once per run by debian_tree; the base
# disk and the image are built from it, so they hold the same files.
debian_work_tree() {
	[[ -d "$WORK/debian" ]] && return
	need_root "the Debian rootfs (chroot useradd)"
	debian_tree "$WORK/debian"
}

build_debian_disk() {
	local dir="$ASSETS/rootfs/debian-$DEBIAN_SUITE" recipe
	recipe="$(debian_image_recipe)"
	if [[ -f "$dir/base.ext4" && -f "$dir/base.ext4.sha256" && "$(cat "$dir/recipe" 2>/dev/null)" == "$recipe" ]]; then
		log "rootfs debian-$DEBIAN_SUITE present"
		return
	fi
	log "rootfs debian-$DEBIAN_SUITE: building the base disk"
	local t="$WORK/debian" epoch start img="$dir/.base.ext4.tmp.$$"
	debian_work_tree
	epoch="$(cat "$dir/debootstrap.epoch")"
	# shellcheck disable=SC2016 # dpkg-query's format, not shell
	chroot "$t" dpkg-query -W -f='${Package} ${Version}\n' >"$dir/packages.txt"
	PARTIAL+=("$img")
	start=$SECONDS
	make_ext4 "$t" "$img" "debian-$DEBIAN_SUITE" "$epoch"
	log "  mkfs + timestamps + fsck: $((SECONDS - start)) s"
	publish_image "$img" "$dir"
	echo "$recipe" >"$dir/recipe"
	log "rootfs debian-$DEBIAN_SUITE built"
}

# debian_oci_recipe: the tree's recipe, the image config, and the writer's
# source (a change in how the archive is laid out rebuilds it).
debian_oci_recipe() {
	local src
	src="$(find "$REPO/hack/ociimage" "$REPO/internal/oci" -name '*.go' ! -name '*_test.go' | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)"
	echo "$(debian_image_recipe) oci $DEBIAN_OCI_REF ${DEBIAN_OCI_CONFIG[*]} writer $src"
}

# build_ociimage OUT: hack/ociimage, built once per run.
build_ociimage() {
	[[ -x "$1" ]] && return
	need go
	(cd "$REPO" && go build -trimpath -buildvcs=false -o "$1" ./hack/ociimage)
}

# make_oci TREE OUT EPOCH [REF CONFIG...]: TREE as the image archive OUT
# (default: the Debian image's ref and config); prints its manifest digest.
# Call it with stdout redirected, not in $(...), where errexit is off.
make_oci() {
	local tree="$1" out="$2" epoch="$3" ref="${4:-$DEBIAN_OCI_REF}"
	local -a config=("${DEBIAN_OCI_CONFIG[@]}")
	(($# > 4)) && config=("${@:5}")
	build_ociimage "$WORK/ociimage"
	clamp_mtimes "$tree" "$epoch"
	"$WORK/ociimage" -dir "$tree" -ref "$ref" -o "$out" "${config[@]}"
}

build_debian_oci() {
	local dir="$ASSETS/rootfs/debian-$DEBIAN_SUITE" recipe
	recipe="$(debian_oci_recipe)"
	if [[ -f "$dir/image.tar" && -f "$dir/image.digest" && "$(cat "$dir/image.recipe" 2>/dev/null)" == "$recipe" ]]; then
		log "image $DEBIAN_OCI_REF present"
		return
	fi
	log "image $DEBIAN_OCI_REF: building $dir/image.tar"
	local start=$SECONDS out="$dir/.image.tar.tmp.$$" epoch
	epoch="$(cat "$dir/debootstrap.epoch")"
	debian_work_tree
	log "  tree ready in $((SECONDS - start)) s"
	start=$SECONDS
	PARTIAL+=("$out" "$out.digest")
	make_oci "$WORK/debian" "$out" "$epoch" >"$out.digest"
	mv "$out" "$dir/image.tar"
	mv "$out.digest" "$dir/image.digest"
	echo "$recipe" >"$dir/image.recipe"
	log "  archive written in $((SECONDS - start)) s: $(stat -c %s "$dir/image.tar") bytes, manifest $(cat "$dir/image.digest")"
}

# ----------------------------------------------------- code interpreter

# INTERP_PROVIDED: what Debian's python3-fonttools (which matplotlib needs)
# depends on but neither it nor matplotlib imports for plotting; with them
# come pythran, gcc, g++ and boost's headers (~650 MB). A local package
# provides them (at bookworm's versions: fonttools asks for scipy >= 1.8.1),
# so dpkg stays consistent and `apt-get install python3-scipy`
# still works in a sandbox that wants it.
INTERP_PROVIDED="python3-scipy (= 1.10.1), python3-sympy (= 1.11.1)"

# interp_provides DEB: that package.
interp_provides() {
	local d="$WORK/slim-deb"
	mkdir -p "$d/DEBIAN"
	cat >"$d/DEBIAN/control" <<-EOF
		Package: sandlot-interpreter-slim
		Version: 1
		Architecture: all
		Maintainer: sandlot <sandlot@localhost>
		Provides: $INTERP_PROVIDED
		Description: stands in for dependencies matplotlib does not use
		 python3-fonttools depends on scipy and sympy (and through them on a
		 compiler); sandlot's code-interpreter image leaves them out.
	EOF
	dpkg-deb --root-owner-group --build "$d" "$1" >/dev/null
}

interp_tree_recipe() {
	echo "$(debootstrap_recipe) epoch $(cat "$ASSETS/rootfs/debian-$DEBIAN_SUITE/debootstrap.epoch") + provided $INTERP_PROVIDED + apt-get install --no-install-recommends $INTERP_PACKAGES"
}

# interp_tarball: the debootstrap tree with INTERP_PACKAGES installed by apt
# in a chroot, cached as a tarball (the slow step: ~150 MB from the mirror).
interp_tarball() {
	local dir="$ASSETS/rootfs/code-interpreter-$DEBIAN_SUITE" recipe
	local tar="$dir/tree.tar.zst"
	recipe="$(interp_tree_recipe)"
	if [[ -f "$tar" && "$(cat "$dir/tree.recipe" 2>/dev/null)" == "$recipe" ]]; then
		log "code-interpreter tree present ($(stat -c %s "$tar") bytes)"
		return
	fi
	need_root "the code-interpreter tree (chroot apt-get)"
	local t="$WORK/interp-tree" mirror start=$SECONDS
	mirror="$(debian_mirror)"
	mkdir -p "$t"
	unpack_tree "$ASSETS/rootfs/debian-$DEBIAN_SUITE/debootstrap.tar.zst" "$t"
	echo "deb $mirror $DEBIAN_SUITE main" >"$t/etc/apt/sources.list"
	cp /etc/resolv.conf "$t/etc/resolv.conf"
	mount -t proc proc "$t/proc"
	interp_provides "$t/tmp/sandlot-slim.deb"
	log "code-interpreter tree: apt-get install $INTERP_PACKAGES (a few minutes)"
	if ! chroot "$t" /bin/sh -c "dpkg -i /tmp/sandlot-slim.deb && rm /tmp/sandlot-slim.deb && apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $INTERP_PACKAGES" >"$WORK/interp-apt.log" 2>&1; then
		tail -n 20 "$WORK/interp-apt.log" >&2
		die "apt-get install in the code-interpreter tree failed"
	fi
	umount "$t/proc"
	chroot "$t" apt-get clean
	log "  installed in $((SECONDS - start)) s ($(du -sm "$t" | cut -f1) MB)"
	mkdir -p "$dir"
	pack_tree "$t" "$tar"
	echo "$recipe" >"$dir/tree.recipe"
	rm -rf "$t"
}

interp_oci_recipe() {
	echo "$(interp_tree_recipe) $(debian_oci_recipe) $INTERP_OCI_REF"
}

# build_interpreter: the code-interpreter image (image.tar only: its disk is
# made by the nodes from the image, as for any template).
build_interpreter() {
	need tar zstd
	build_mcp_gateway
	[[ -f "$ASSETS/rootfs/debian-$DEBIAN_SUITE/debootstrap.tar.zst" ]] || build_debian
	local dir="$ASSETS/rootfs/code-interpreter-$DEBIAN_SUITE" recipe
	recipe="$(interp_oci_recipe)"
	if [[ -f "$dir/image.tar" && "$(cat "$dir/image.recipe" 2>/dev/null)" == "$recipe" ]]; then
		log "image $INTERP_OCI_REF present"
		return
	fi
	interp_tarball
	log "image $INTERP_OCI_REF: building $dir/image.tar"
	local start=$SECONDS out="$dir/.image.tar.tmp.$$" epoch
	epoch="$(cat "$ASSETS/rootfs/debian-$DEBIAN_SUITE/debootstrap.epoch")"
	debian_tree "$WORK/interp" "$dir/tree.tar.zst"
	chroot "$WORK/interp" dpkg-query -W -f='${Package} ${Version}\n' >"$dir/packages.txt"
	PARTIAL+=("$out" "$out.digest")
	make_oci "$WORK/interp" "$out" "$epoch" "$INTERP_OCI_REF" "${DEBIAN_OCI_CONFIG[@]}" >"$out.digest"
	mv "$out" "$dir/image.tar"
	mv "$out.digest" "$dir/image.digest"
	echo "$recipe" >"$dir/image.recipe"
	rm -rf "$WORK/interp"
	log "  archive written in $((SECONDS - start)) s: $(stat -c %s "$dir/image.tar") bytes, manifest $(cat "$dir/image.digest")"
}

# ---------------------------------------------------------------- summary

write_env() {
	local k="$ASSETS/kernel/current" i="$ASSETS/initramfs/current"
	[[ -f "$k/vmlinux" && -f "$i/initramfs.cpio.gz" ]] || return 0
	{
		echo "SANDLOT_VM_KERNEL=$(cd "$k" && pwd -P)/vmlinux"
		echo "SANDLOT_VM_INITRD=$(cd "$i" && pwd -P)/initramfs.cpio.gz"
		echo "SANDLOT_VM_MODULES=$(cat "$i/modules.env")"
		local r
		for r in busybox "debian-$DEBIAN_SUITE"; do
			[[ -f "$ASSETS/rootfs/$r/base.ext4" ]] || continue
			local v="${r%%-*}"
			echo "SANDLOT_VM_BASE_${v^^}=$ASSETS/rootfs/$r/base.ext4"
		done
		local img="$ASSETS/rootfs/debian-$DEBIAN_SUITE/image.tar"
		if [[ -f "$img" ]]; then
			echo "SANDLOT_VM_IMAGE_DEBIAN=$img"
			echo "SANDLOT_VM_IMAGE_DEBIAN_REF=$DEBIAN_OCI_REF"
		fi
		img="$ASSETS/rootfs/code-interpreter-$DEBIAN_SUITE/image.tar"
		if [[ -f "$img" ]]; then
			echo "SANDLOT_VM_IMAGE_INTERPRETER=$img"
			echo "SANDLOT_VM_IMAGE_INTERPRETER_REF=$INTERP_OCI_REF"
		fi
	} >"$ASSETS/current.env.tmp.$$"
	mv "$ASSETS/current.env.tmp.$$" "$ASSETS/current.env"
}

# ------------------------------------------------------------------ check

# check: rebuild what can be rebuilt into WORK and compare with the cache.
check() {
	local fail=0 k="$ASSETS/kernel/current" got want
	build_mcp_gateway
	if [[ -f "$k/vmlinux" ]]; then
		if valid_vmlinux "$k/vmlinux" && has_pvh_note "$k/vmlinux"; then
			log "check: vmlinux is an ELF with a PVH entry note"
		else
			log "check: FAIL vmlinux"
			fail=1
		fi
	fi
	local i="$ASSETS/initramfs/current"
	if [[ -f "$i/initramfs.cpio.gz" ]]; then
		local w="$WORK/check-initramfs"
		mkdir -p "$w"
		(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$w/sandlot-guest" ./cmd/sandlot-guest)
		if [[ "$(sha256 "$w/sandlot-guest")" != "$(awk '$1 == "agent" { print $2 }' "$i/manifest")" ]]; then
			log "check: the agent changed since initramfs/current was built (run the initramfs step); skipping the cpio comparison"
		else
			make_cpio "$w/sandlot-guest" "$(cd "$k" && pwd -P)" "$w/initramfs.cpio.gz"
			got="$(sha256 "$w/initramfs.cpio.gz")"
			want="$(sha256 "$i/initramfs.cpio.gz")"
			if [[ "$got" == "$want" ]]; then
				log "check: initramfs rebuilt identically ($got)"
			else
				log "check: FAIL initramfs rebuilt as $got, cached $want"
				fail=1
			fi
		fi
	fi
	if [[ $EUID -ne 0 ]]; then
		log "check: not root, the base disks are not rebuilt"
		((fail == 0)) || die "check failed"
		return
	fi
	local dir="$ASSETS/rootfs/busybox"
	if [[ -f "$dir/base.ext4" ]]; then
		rm -rf "$WORK/cb"
		busybox_tree "$WORK/cb"
		make_ext4 "$WORK/cb" "$WORK/cb.ext4" busybox "$(stat -c %Y /bin/busybox)"
		got="$(sha256 "$WORK/cb.ext4")"
		want="$(cut -d' ' -f1 "$dir/base.ext4.sha256")"
		if [[ "$got" == "$want" && "$(sha256 "$dir/base.ext4")" == "$want" ]]; then
			log "check: busybox base.ext4 rebuilt identically ($got)"
		else
			log "check: FAIL busybox base.ext4 rebuilt as $got, recorded $want"
			fail=1
		fi
		rm -rf "$WORK/cb" "$WORK/cb.ext4"
	fi
	dir="$ASSETS/rootfs/debian-$DEBIAN_SUITE"
	if [[ -f "$dir/base.ext4" ]]; then
		local start=$SECONDS epoch
		debian_tree "$WORK/cd"
		epoch="$(cat "$dir/debootstrap.epoch")"
		make_ext4 "$WORK/cd" "$WORK/cd.ext4" "debian-$DEBIAN_SUITE" "$epoch"
		got="$(sha256 "$WORK/cd.ext4")"
		want="$(cut -d' ' -f1 "$dir/base.ext4.sha256")"
		if [[ "$got" == "$want" && "$(sha256 "$dir/base.ext4")" == "$want" ]]; then
			log "check: debian base.ext4 rebuilt identically from the tarball in $((SECONDS - start)) s ($got)"
		else
			log "check: FAIL debian base.ext4 rebuilt as $got, recorded $want"
			fail=1
		fi
		check_oci "$WORK/cd" "$epoch" || fail=1
		rm -rf "$WORK/cd" "$WORK/cd.ext4"
	fi
	((fail == 0)) || die "check failed"
	log "check: all good"
}

# check_oci TREE EPOCH: the image archive rebuilt from TREE (the Debian tree
# check made) has the digest and bytes recorded.
check_oci() {
	local dir="$ASSETS/rootfs/debian-$DEBIAN_SUITE" got want
	[[ -f "$dir/image.tar" ]] || return 0
	if [[ "$(cat "$dir/image.recipe" 2>/dev/null)" != "$(debian_oci_recipe)" ]]; then
		log "check: the image's recipe changed since image.tar was built (run the debian step); skipping its comparison"
		return 0
	fi
	make_oci "$1" "$WORK/check.oci.tar" "$2" >"$WORK/check.oci.digest"
	got="$(cat "$WORK/check.oci.digest")"
	want="$(cat "$dir/image.digest")"
	if [[ "$got" == "$want" && "$(sha256 "$WORK/check.oci.tar")" == "$(sha256 "$dir/image.tar")" ]]; then
		log "check: image.tar rebuilt identically (manifest $got)"
		rm -f "$WORK/check.oci.tar"
		return 0
	fi
	log "check: FAIL image.tar rebuilt with manifest $got, recorded $want"
	rm -f "$WORK/check.oci.tar"
	return 1
}

# ------------------------------------------------------------------- main

steps=("$@")
((${#steps[@]})) || steps=(kernel initramfs busybox debian interpreter)
mkdir -p "$ASSETS"
for s in "${steps[@]}"; do
	case "$s" in
	kernel) build_kernel ;;
	initramfs) build_initramfs ;;
	busybox) build_busybox ;;
	debian) build_debian ;;
	interpreter) build_interpreter ;;
	check) check ;;
	*) die "unknown step $s (kernel, initramfs, busybox, debian, interpreter, check)" ;;
	esac
done
write_env
echo "$ASSETS"

#!/usr/bin/env bash
# vm-layer.sh PATH MiB
# Creates a sandbox's writable layer: a sparse raw file of MiB MiB formatted
# ext4 (the guest's /init mounts it as the overlay's upper layer and creates
# upper/ and work/ itself). Refuses to overwrite an existing file unless
# FORCE=1. Only the metadata mkfs writes is allocated (under 1 MiB for 1 GiB):
# inode tables and journal stay holes, and the groups are flagged zeroed, so
# the guest's ext4lazyinit has nothing to do.
set -euo pipefail

if [[ $# -ne 2 || ! "$2" =~ ^[0-9]+$ ]]; then
	echo "usage: $0 PATH MiB" >&2
	exit 2
fi
path="$1" mib="$2"
((mib >= 8)) || { echo "vm-layer: $mib MiB is too small (at least 8)" >&2; exit 2; }
if [[ -e "$path" && "${FORCE:-0}" != 1 ]]; then
	echo "vm-layer: $path exists (FORCE=1 overwrites it)" >&2
	exit 1
fi
tmp="$path.tmp.$$"
trap 'rm -f "$tmp"' EXIT
rm -f "$tmp"
truncate -s "${mib}M" "$tmp"
# A fresh sparse file reads as zeros: mke2fs's discard (a hole punch on a
# file) makes it flag the inode tables zeroed without writing them, and the
# journal need not be zeroed either (lazy_journal_init is only unsafe over
# old data, and there is none).
mkfs.ext4 -q -F -T default -t ext4 -b 4096 -m 0 -E discard,lazy_journal_init=1 \
	-L sandlot-rw "$tmp"
mv "$tmp" "$path"
trap - EXIT
echo "$path"

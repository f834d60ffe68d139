#!/bin/sh
# guest-root.sh ROOT CMD...
# Builds a throwaway sandbox root in ROOT from the host's /usr and /etc
# (read-only binds; /dev and /proc for processes; writable /tmp, /root,
# /home/user), then execs CMD. Run it under `unshare --mount` so every
# mount vanishes with the last process of the namespace: nothing to clean.
set -eu
root=$1
shift
mkdir -p "$root/usr" "$root/etc" "$root/dev" "$root/proc" "$root/tmp" "$root/root" \
	"$root/home/user" "$root/run" "$root/var/tmp"
chmod 1777 "$root/tmp" "$root/var/tmp"
for d in usr etc; do
	mount --bind "/$d" "$root/$d"
	mount -o remount,bind,ro "$root/$d"
done
for l in bin sbin lib lib32 lib64 libx32; do
	if [ -L "/$l" ] && [ ! -e "$root/$l" ]; then ln -s "$(readlink "/$l")" "$root/$l"; fi
done
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
exec "$@"

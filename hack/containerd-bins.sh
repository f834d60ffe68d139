#!/usr/bin/env bash
# Builds containerd, ctr and containerd-shim-runc-v2 at one version from
# the Go module proxy into ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/containerd/<version>/,
# skipping what exists (about 6 min on a cold cache, then seconds). The
# shim integration tests and the cluster harness run this containerd.
# Prints the directory on its last line of stdout.
set -euo pipefail

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
OUT="${SANDLOT_CACHE:-$HOME/.cache/sandlot}/containerd/$CONTAINERD_VERSION"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0
mkdir -p "$OUT"

log() { printf '[containerd-bins %s] %s\n' "$(date +%T)" "$*" >&2; }

for cmd in containerd ctr containerd-shim-runc-v2; do
	if [[ -x "$OUT/$cmd" ]]; then
		log "$cmd $CONTAINERD_VERSION present"
		continue
	fi
	log "$cmd $CONTAINERD_VERSION: building (containerd ~6 min cold, the others ~1 min after it)"
	start=$SECONDS
	GOBIN="$OUT/.tmp" go install -trimpath -ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/$cmd@$CONTAINERD_VERSION"
	mv "$OUT/.tmp/$cmd" "$OUT/$cmd"
	log "$cmd built in $((SECONDS - start)) s"
done
rmdir "$OUT/.tmp" 2>/dev/null || true
echo "$OUT"

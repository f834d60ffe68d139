#!/usr/bin/env bash
# Builds the MinIO server the s3 store tests run against, from the Go module
# proxy, into ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/minio/<version>/minio and
# skips the build when that binary exists (about 8 min on a cold module cache
# on 2 cores, ~30 s warm). There is no MinIO download site or Debian package
# here, and MinIO publishes only pseudo-versions to the proxy, so the version
# is pinned to one.
#
# A wrapper module (not `go install pkg@version`) keeps a go.sum of its own
# under the cache's src dir, so a rebuild resolves exactly the same modules.
# Prints the directory on its last line of stdout.
set -euo pipefail

MINIO_VERSION="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
OUT="$CACHE/minio/$MINIO_VERSION"
MOD="$CACHE/src/minio-$MINIO_VERSION"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { printf '[minio-bins %s] %s\n' "$(date +%T)" "$*" >&2; }

if [[ -x "$OUT/minio" ]]; then
	log "minio $MINIO_VERSION present"
	echo "$OUT"
	exit 0
fi
mkdir -p "$OUT" "$MOD"

# The main package is github.com/minio/minio itself (it imports MinIO's
# internal packages, so it cannot be re-created in a module of ours): the
# wrapper only requires it, and the tool directive keeps it through tidy.
if [[ ! -f "$MOD/go.sum" ]]; then
	log "minio $MINIO_VERSION: generating wrapper module in $MOD"
	cat >"$MOD/go.mod" <<EOF
module sandlot.local/miniobuild

go 1.26

require github.com/minio/minio $MINIO_VERSION

tool github.com/minio/minio
EOF
	log "minio $MINIO_VERSION: resolving modules"
	(cd "$MOD" && go mod tidy >&2)
fi

log "minio $MINIO_VERSION: building (about 8 min on a cold cache)"
start=$SECONDS
(cd "$MOD" && go build -trimpath -ldflags="-s -w" -o "$OUT/minio.tmp" github.com/minio/minio)
mv "$OUT/minio.tmp" "$OUT/minio"
log "minio $MINIO_VERSION built in $((SECONDS - start)) s ($(du -m "$OUT/minio" | cut -f1) MB)"
echo "$OUT"

#!/usr/bin/env bash
# Builds the CNCF Distribution registry (the OCI registry `make up` runs
# and its kubelets pull sandlot's images from) from the Go module proxy,
# into ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/registry/<version>/registry,
# and skips the build when that binary exists. There is no registry
# download site or image here: Go modules are what this machine reaches.
#
# A wrapper module (not `go install pkg@version`) keeps a go.sum of its own
# under the cache's src dir, so a rebuild resolves exactly the same modules.
# Prints the directory on its last line of stdout.
set -euo pipefail

REGISTRY_VERSION="${REGISTRY_VERSION:-v3.1.2}"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
OUT="$CACHE/registry/$REGISTRY_VERSION"
MOD="$CACHE/src/registry-$REGISTRY_VERSION"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { printf '[registry-bins %s] %s\n' "$(date +%T)" "$*" >&2; }

if [[ -x "$OUT/registry" ]]; then
	log "registry $REGISTRY_VERSION present"
	echo "$OUT"
	exit 0
fi
mkdir -p "$OUT" "$MOD"

if [[ ! -f "$MOD/go.sum" ]]; then
	log "registry $REGISTRY_VERSION: generating wrapper module in $MOD"
	cat >"$MOD/go.mod" <<MODEOF
module sandlot.local/registrybuild

go 1.26

require github.com/distribution/distribution/v3 $REGISTRY_VERSION

tool github.com/distribution/distribution/v3/cmd/registry
MODEOF
	log "registry $REGISTRY_VERSION: resolving modules"
	(cd "$MOD" && go mod tidy >&2)
fi

log "registry $REGISTRY_VERSION: building (about 2 min on a cold cache)"
start=$SECONDS
(cd "$MOD" && go build -trimpath -ldflags="-s -w" -o "$OUT/registry.tmp" github.com/distribution/distribution/v3/cmd/registry)
mv "$OUT/registry.tmp" "$OUT/registry"
log "registry $REGISTRY_VERSION built in $((SECONDS - start)) s ($(du -m "$OUT/registry" | cut -f1) MB)"
echo "$OUT"

#!/usr/bin/env bash
# Builds the Prometheus server `make dashboard-png` scrapes a real run with,
# from the Go module proxy, into
# ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/prometheus/<version>/prometheus and
# skips the build when that binary exists (about 4.5 min cold on 2 cores). There is no Prometheus download
# site or Debian package here. Its web UI's assets are not built (npm): the
# tool only uses the HTTP API.
#
# A wrapper module keeps a go.sum of its own under the cache's src dir, so a
# rebuild resolves exactly the same modules. Prints the directory on its
# last line of stdout.
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
OUT="$CACHE/prometheus/$PROMETHEUS_VERSION"
MOD="$CACHE/src/prometheus-$PROMETHEUS_VERSION"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { printf '[prometheus-bins %s] %s\n' "$(date +%T)" "$*" >&2; }

if [[ -x "$OUT/prometheus" ]]; then
	log "prometheus $PROMETHEUS_VERSION present"
	echo "$OUT"
	exit 0
fi
mkdir -p "$OUT" "$MOD"

if [[ ! -f "$MOD/go.sum" ]]; then
	log "prometheus $PROMETHEUS_VERSION: generating wrapper module in $MOD"
	cat >"$MOD/go.mod" <<EOF
module sandlot.local/prometheusbuild

go 1.26

require github.com/prometheus/prometheus $PROMETHEUS_VERSION

tool github.com/prometheus/prometheus/cmd/prometheus
EOF
	log "prometheus $PROMETHEUS_VERSION: resolving modules"
	(cd "$MOD" && go mod tidy >&2)
fi

log "prometheus $PROMETHEUS_VERSION: building"
start=$SECONDS
(cd "$MOD" && go build -trimpath -ldflags="-s -w" -o "$OUT/prometheus.tmp" github.com/prometheus/prometheus/cmd/prometheus)
mv "$OUT/prometheus.tmp" "$OUT/prometheus"
log "prometheus $PROMETHEUS_VERSION built in $((SECONDS - start)) s ($(du -m "$OUT/prometheus" | cut -f1) MB)"
echo "$OUT"

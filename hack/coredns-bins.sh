#!/usr/bin/env bash
# Builds CoreDNS (the local clusters' DNS, behind the kube-dns Service) from
# the Go module proxy into ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/coredns/
# <version>/coredns, and skips the build when that binary exists. Only the
# plugins the clusters' Corefile uses are compiled in (a wrapper main, the
# way CoreDNS documents external builds), which keeps the cloud providers'
# SDKs out: a few minutes cold on 2 cores. Prints the directory on its last
# line of stdout.
set -euo pipefail

COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
OUT="$CACHE/coredns/$COREDNS_VERSION"
MOD="$CACHE/src/coredns-$COREDNS_VERSION"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { printf '[coredns-bins %s] %s\n' "$(date +%T)" "$*" >&2; }

if [[ -x "$OUT/coredns" ]]; then
	log "coredns $COREDNS_VERSION present"
	echo "$OUT"
	exit 0
fi
mkdir -p "$OUT" "$MOD"

# Directives in CoreDNS's plugin.cfg order (the order a query passes them).
cat >"$MOD/main.go" <<'EOF'
// Command coredns is CoreDNS with the plugins sandlot's local clusters use.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes", "forward"}
}

func main() { coremain.Run() }
EOF
if [[ ! -f "$MOD/go.sum" ]]; then
	log "coredns $COREDNS_VERSION: generating wrapper module in $MOD"
	cat >"$MOD/go.mod" <<EOF
module sandlot.local/corednsbuild

go 1.26

require github.com/coredns/coredns $COREDNS_VERSION
EOF
	log "coredns $COREDNS_VERSION: resolving modules"
	(cd "$MOD" && go mod tidy >&2)
fi

log "coredns $COREDNS_VERSION: building (a few minutes on a cold cache)"
start=$SECONDS
(cd "$MOD" && go build -trimpath -ldflags="-s -w" -o "$OUT/coredns.tmp" .)
mv "$OUT/coredns.tmp" "$OUT/coredns"
log "coredns $COREDNS_VERSION built in $((SECONDS - start)) s ($(du -m "$OUT/coredns" | cut -f1) MB)"
echo "$OUT"

#!/usr/bin/env bash
# Builds Kubernetes binaries and etcd from the Go module proxy into
#   ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/k8s/<k8s version>/
# and skips every binary that already exists there. There is no download site
# here, so envtest's usual setup-envtest cannot be used.
#
#   hack/k8s-bins.sh                      # etcd + kube-apiserver (envtest assets)
#   hack/k8s-bins.sh kubelet kube-proxy   # plus more components (cluster harness)
#
# Prints the asset directory on its last line of stdout.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
OUT="$CACHE/k8s/$K8S_VERSION"
SRC="$CACHE/src"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0

log() { printf '[k8s-bins %s] %s\n' "$(date +%T)" "$*" >&2; }

components=(kube-apiserver "$@")
mkdir -p "$OUT" "$SRC"

build_etcd() {
	local stamp="$OUT/etcd.version"
	if [[ -x "$OUT/etcd" && "$(cat "$stamp" 2>/dev/null)" == "$ETCD_VERSION" ]]; then
		log "etcd $ETCD_VERSION present"
		return
	fi
	local mod="$SRC/etcd-$ETCD_VERSION"
	mkdir -p "$mod"
	cat >"$mod/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
	if [[ ! -f "$mod/go.mod" ]]; then
		(cd "$mod" && go mod init sandlot.local/etcdbuild >/dev/null 2>&1)
	fi
	log "etcd $ETCD_VERSION: resolving modules"
	(cd "$mod" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2 && go mod tidy >&2)
	log "etcd $ETCD_VERSION: building (about 3 min on a cold cache)"
	(cd "$mod" && go build -trimpath -ldflags="-s -w" -o "$OUT/etcd.tmp" .)
	mv "$OUT/etcd.tmp" "$OUT/etcd"
	echo "$ETCD_VERSION" >"$stamp"
	log "etcd $ETCD_VERSION built"
}

# k8s.io/kubernetes replaces its staging repos with ./staging paths, so it
# cannot be built with `go install`: a wrapper module replaces each required
# staging repo with its published v0.x version.
k8s_wrapper() {
	local mod="$SRC/k8s-$K8S_VERSION"
	local minor="${K8S_VERSION#v1.}"
	minor="${minor%%.*}"
	mkdir -p "$mod"
	if [[ ! -f "$mod/go.sum" ]]; then
		log "kubernetes $K8S_VERSION: generating wrapper module"
		local kmod
		kmod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
		{
			echo "module sandlot.local/k8sbuild"
			echo
			echo "go 1.26"
			echo
			echo "require k8s.io/kubernetes $K8S_VERSION"
			echo
			echo "replace ("
			grep '=> ./staging' "$kmod" | awk '{print $1}' | grep -v -e sample-controller -e sample-cli-plugin |
				while read -r m; do echo "	$m => $m v0.$minor.${K8S_VERSION##*.}"; done
			echo ")"
			echo
			echo "tool ("
			for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
				echo "	k8s.io/kubernetes/cmd/$c"
			done
			echo ")"
		} >"$mod/go.mod"
		log "kubernetes $K8S_VERSION: go mod tidy (downloads ~1 GB of modules)"
		(cd "$mod" && go mod tidy >&2)
	fi
	echo "$mod"
}

build_k8s() {
	local c="$1" mod="$2"
	if [[ -x "$OUT/$c" ]]; then
		log "$c $K8S_VERSION present"
		return
	fi
	local minor="${K8S_VERSION#v1.}"
	minor="${minor%%.*}"
	local ldf="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldf="$ldf -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
		ldf="$ldf -X $p.buildDate=2026-01-01T00:00:00Z -X $p.gitCommit=0000000000000000000000000000000000000000"
	done
	log "$c $K8S_VERSION: building (kube-apiserver takes ~16 min on a cold cache, the others ~1-2 min after it)"
	local start=$SECONDS
	(cd "$mod" && go build -trimpath -ldflags="$ldf" -o "$OUT/$c.tmp" "k8s.io/kubernetes/cmd/$c")
	mv "$OUT/$c.tmp" "$OUT/$c"
	log "$c built in $((SECONDS - start)) s"
}

build_etcd
mod="$(k8s_wrapper)"
for c in "${components[@]}"; do
	build_k8s "$c" "$mod"
done
echo "$OUT"

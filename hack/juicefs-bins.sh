#!/usr/bin/env bash
# Builds JuiceFS v1.2.5 (the client: format, mount, info) into
# ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/juicefs/<version>/juicefs from the
# upstream sources in $SANDLOT_THIRDPARTY (default ../shared/thirdparty: the
# Go module proxy refuses github.com/juicedata/*), the way
# ../shared/reference/recipes/juicefs-from-source.md proves it, and skips the
# build when the binary exists (~5.5 min cold on 2 cores). Only the metadata
# engine and object stores sandlot uses are compiled in (upstream's
# juicefs.lite tag set: Redis, S3/MinIO, file). Prints the directory on its
# last line of stdout.
#   hack/juicefs-bins.sh         the client
#   hack/juicefs-bins.sh csi     also the CSI driver v0.32.4 and node-driver-registrar v2.17.0
#                                (into .../juicefs-csi/<driver version>/; ~6-12 min cold). The
#                                controller's external-provisioner is not built: sandlot's local
#                                cluster binds a static PV (no StorageClass provisioning).
set -euo pipefail

JUICEFS_VERSION="${JUICEFS_VERSION:-v1.2.5}"
CSI_VERSION="${JUICEFS_CSI_VERSION:-v0.32.4}"
REGISTRAR_VERSION="${REGISTRAR_VERSION:-v2.17.0}"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TP="${SANDLOT_THIRDPARTY:-$ROOT/../shared/thirdparty}"
OUT="$CACHE/juicefs/$JUICEFS_VERSION"
SRC="$CACHE/src/juicefs-$JUICEFS_VERSION"
export GOFLAGS=-buildvcs=false

log() { printf '[juicefs-bins %s] %s\n' "$(date +%T)" "$*" >&2; }

# unpack <tarball name> <into dir>: a source tree from $TP, once.
unpack() {
	local tarball="$TP/$1.tar.zst"
	[[ -f "$2/.unpacked-$1" ]] && return
	if [[ ! -f "$tarball" ]]; then
		log "missing $tarball: set SANDLOT_THIRDPARTY to the folder holding the upstream sources (see ../shared/thirdparty/README.md)"
		exit 1
	fi
	rm -rf "${2:?}/$1" && mkdir -p "$2"
	tar --zstd -xf "$tarball" -C "$2" # each tarball holds one top directory named like it
	touch "$2/.unpacked-$1"
}

stub() { # stub <dir> <module path>: a go.mod standing in for a fork the build tags leave out
	mkdir -p "$SRC/stub/$1"
	echo "module $2" >"$SRC/stub/$1/go.mod"
}

build_client() {
	if [[ -x "$OUT/juicefs" ]]; then
		log "juicefs $JUICEFS_VERSION present"
		return
	fi
	mkdir -p "$OUT" "$SRC"
	for t in juicefs juicedata-go-fuse juicedata-cli juicedata-mpb; do unpack "$t" "$SRC"; done
	stub minio github.com/minio/minio
	stub xorm xorm.io/xorm
	stub obs github.com/huaweicloud/huaweicloud-sdk-go-obs
	stub nfs github.com/vmware/go-nfs-client
	local mod="$SRC/juicefs"
	if ! grep -q '=> ../stub/minio' "$mod/go.mod"; then
		sed -i -E '/^replace github.com\/(minio\/minio|hanwen\/go-fuse|vbauerster\/mpb|huaweicloud|urfave\/cli|vmware\/go-nfs)/d; /^replace xorm.io/d' "$mod/go.mod"
		local up=..
		cat >>"$mod/go.mod" <<EOM
replace github.com/minio/minio v0.0.0-20210206053228-97fe57bba92c => $up/stub/minio
replace github.com/hanwen/go-fuse/v2 v2.1.1-0.20210611132105-24a1dfe6b4f8 => $up/juicedata-go-fuse
replace github.com/vbauerster/mpb/v7 v7.0.3 => $up/juicedata-mpb
replace xorm.io/xorm v1.0.7 => $up/stub/xorm
replace github.com/huaweicloud/huaweicloud-sdk-go-obs v3.21.12+incompatible => $up/stub/obs
replace github.com/urfave/cli/v2 v2.19.3 => $up/juicedata-cli
replace github.com/vmware/go-nfs-client v0.0.0-20190605212624-d43b92724c1b => $up/stub/nfs
EOM
	fi
	log "juicefs $JUICEFS_VERSION: building (about 5.5 min on a cold cache)"
	local start=$SECONDS
	(cd "$mod" && go build -ldflags="-s -w" -tags nogateway,nowebdav,nocos,nobos,nohdfs,noibmcos,noobs,nooss,noqingstor,nosftp,noswift,noazure,nogs,noufile,nob2,nonfs,nodragonfly,nosqlite,nomysql,nopg,notikv,nobadger,noetcd,nocifs,nostorj,noqiniu,notos,noks3 \
		-o "$OUT/juicefs.tmp" .)
	mv "$OUT/juicefs.tmp" "$OUT/juicefs"
	log "juicefs built in $((SECONDS - start)) s: $("$OUT/juicefs" version)"
}

# build_csi: the CSI driver (its node plugin mounts by process, with the
# client above) and the kubelet registrar, static (they go into an image).
build_csi() {
	local out="$CACHE/juicefs-csi/$CSI_VERSION" src="$CACHE/src/juicefs-csi-$CSI_VERSION"
	if [[ -x "$out/juicefs-csi-driver" && -x "$out/csi-node-driver-registrar" ]]; then
		log "juicefs-csi-driver $CSI_VERSION, node-driver-registrar $REGISTRAR_VERSION present"
		echo "$out"
		return
	fi
	mkdir -p "$out" "$src"
	for t in juicefs-csi-driver node-driver-registrar; do unpack "$t" "$src"; done
	# The operator module serves only the dashboard (cmd/dashboard), not ./cmd/.
	mkdir -p "$src/stub/operator"
	echo 'module github.com/juicedata/juicefs-operator' >"$src/stub/operator/go.mod"
	local mod="$src/juicefs-csi-driver"
	grep -q '=> ../stub/operator' "$mod/go.mod" ||
		echo 'replace github.com/juicedata/juicefs-operator => ../stub/operator' >>"$mod/go.mod"
	local start=$SECONDS
	log "juicefs-csi-driver $CSI_VERSION: building (6-12 min on a cold cache)"
	(cd "$mod" && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$out/juicefs-csi-driver.tmp" ./cmd/)
	log "node-driver-registrar $REGISTRAR_VERSION: building (vendored)"
	(cd "$src/node-driver-registrar" && CGO_ENABLED=0 go build -mod=vendor -ldflags="-s -w" \
		-o "$out/csi-node-driver-registrar" ./cmd/csi-node-driver-registrar)
	mv "$out/juicefs-csi-driver.tmp" "$out/juicefs-csi-driver"
	log "CSI binaries built in $((SECONDS - start)) s"
	echo "$out"
}

# csi_image: the node plugin's image (by-process mounts need juicefs at
# /usr/local/bin/juicefs and /bin/mount.juicefs, and mount(8)) on the
# Debian tree hack/vm-assets.sh already made, with the registrar beside it;
# upstream's manifests beside the archive.
csi_image() {
	local out="$CACHE/juicefs-csi/$CSI_VERSION" src="$CACHE/src/juicefs-csi-$CSI_VERSION"
	local base="$CACHE/vm/rootfs/debian-bookworm/debootstrap.tar.zst"
	cp "$src/juicefs-csi-driver/deploy/k8s.yaml" "$out/k8s.yaml"
	if [[ -f "$out/image.tar" ]]; then
		log "juicefs-csi-driver image present"
		return
	fi
	if [[ ! -f "$base" ]]; then
		log "missing $base: run make vm-assets first (the image's Debian tree)"
		exit 1
	fi
	local tree="$out/rootfs"
	rm -rf "$tree" && mkdir -p "$tree"
	tar --zstd -xf "$base" -C "$tree"
	install -m 0755 "$OUT/juicefs" "$tree/usr/local/bin/juicefs"
	ln -sf /usr/local/bin/juicefs "$tree/bin/mount.juicefs"
	install -m 0755 "$out/juicefs-csi-driver" "$tree/bin/juicefs-csi-driver"
	install -m 0755 "$out/csi-node-driver-registrar" "$tree/usr/local/bin/csi-node-driver-registrar"
	(cd "$ROOT" && go run ./hack/ociimage -dir "$tree" -ref "docker.io/sandlot/juicefs-csi-driver:$CSI_VERSION" \
		-o "$out/image.tar.tmp" -entrypoint /bin/juicefs-csi-driver >/dev/null)
	mv "$out/image.tar.tmp" "$out/image.tar"
	rm -rf "$tree"
	log "juicefs-csi-driver image: $out/image.tar ($(du -h "$out/image.tar" | cut -f1))"
}

build_client
if [[ "${1:-}" == csi ]]; then
	build_csi >/dev/null
	csi_image
	echo "$CACHE/juicefs-csi/$CSI_VERSION"
	exit 0
fi
echo "$OUT"

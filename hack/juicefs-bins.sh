#!/usr/bin/env bash
# Builds the JuiceFS client (v1.2.5, upstream's "lite" build tags: Redis as
# the metadata engine, S3/MinIO and file as object storage) from the
# upstream sources in $SANDLOT_THIRDPARTY (default ../shared/thirdparty
# beside the checkout: the Go module proxy refuses github.com/juicedata/*)
# into ${SANDLOT_CACHE:-$HOME/.cache/sandlot}/juicefs/<version>/juicefs,
# and skips the build when that binary exists (~5.5 min cold on 2 cores).
# Recipe: reference/recipes/juicefs-from-source.md. Prints the directory on
# its last line of stdout.
set -euo pipefail

JUICEFS_VERSION="${JUICEFS_VERSION:-v1.2.5}"
CACHE="${SANDLOT_CACHE:-$HOME/.cache/sandlot}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TP="${SANDLOT_THIRDPARTY:-$ROOT/../shared/thirdparty}"
OUT="$CACHE/juicefs/$JUICEFS_VERSION"
SRC="$CACHE/src/juicefs-$JUICEFS_VERSION"
export GOFLAGS=-buildvcs=false

log() { printf '[juicefs-bins %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ -x "$OUT/juicefs" ]]; then
	log "juicefs $JUICEFS_VERSION present"
	echo "$OUT"
	exit 0
fi
for t in juicefs juicedata-go-fuse juicedata-cli juicedata-mpb; do
	[[ -f "$TP/$t.tar.zst" ]] || die "$TP/$t.tar.zst not found: set SANDLOT_THIRDPARTY to the folder holding the upstream sources (reference/recipes/juicefs-from-source.md)"
done
command -v zstd >/dev/null || die "zstd not found (Debian: apt-get install zstd; hack/deps.sh installs it)"

rm -rf "$SRC"
mkdir -p "$SRC" "$OUT"
log "juicefs $JUICEFS_VERSION: unpacking the sources from $TP"
for t in juicefs juicedata-go-fuse juicedata-cli juicedata-mpb; do
	tar --zstd -xf "$TP/$t.tar.zst" -C "$SRC"
done
# Four replaced modules are only needed by engines and stores the build
# tags leave out: a go.mod alone stands in for each.
for s in minio:github.com/minio/minio xorm:xorm.io/xorm obs:github.com/huaweicloud/huaweicloud-sdk-go-obs nfs:github.com/vmware/go-nfs-client; do
	mkdir -p "$SRC/stub/${s%%:*}"
	echo "module ${s#*:}" >"$SRC/stub/${s%%:*}/go.mod"
done
cd "$SRC/juicefs"
sed -i -E '/^replace github.com\/(minio\/minio|hanwen\/go-fuse|vbauerster\/mpb|huaweicloud|urfave\/cli|vmware\/go-nfs)/d; /^replace xorm.io/d' go.mod
cat >>go.mod <<'EOF'
replace github.com/minio/minio v0.0.0-20210206053228-97fe57bba92c => ../stub/minio
replace github.com/hanwen/go-fuse/v2 v2.1.1-0.20210611132105-24a1dfe6b4f8 => ../juicedata-go-fuse
replace github.com/vbauerster/mpb/v7 v7.0.3 => ../juicedata-mpb
replace xorm.io/xorm v1.0.7 => ../stub/xorm
replace github.com/huaweicloud/huaweicloud-sdk-go-obs v3.21.12+incompatible => ../stub/obs
replace github.com/urfave/cli/v2 v2.19.3 => ../juicedata-cli
replace github.com/vmware/go-nfs-client v0.0.0-20190605212624-d43b92724c1b => ../stub/nfs
EOF
TAGS=nogateway,nowebdav,nocos,nobos,nohdfs,noibmcos,noobs,nooss,noqingstor,nosftp,noswift,noazure,nogs,noufile,nob2,nonfs,nodragonfly,nosqlite,nomysql,nopg,notikv,nobadger,noetcd,nocifs,nostorj,noqiniu,notos,noks3
log "juicefs $JUICEFS_VERSION: building (about 5.5 min on a cold cache)"
start=$SECONDS
go build -tags "$TAGS" -o "$OUT/juicefs.tmp" .
mv "$OUT/juicefs.tmp" "$OUT/juicefs"
log "juicefs $JUICEFS_VERSION built in $((SECONDS - start)) s: $("$OUT/juicefs" version)"
echo "$OUT"

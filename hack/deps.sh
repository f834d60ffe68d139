#!/usr/bin/env bash
# Installs the Debian packages sandlot's builds, `make up` and `make test`
# need, and only those missing; idempotent, prints what it installs. Called
# by `make up`, `make test` and .ci/run, so a fresh Debian 12 (root, with Go,
# Node and kubectl present) needs nothing installed by hand.
#   hack/deps.sh           install what is missing
#   hack/deps.sh -check    list what is missing, install nothing (exit 1 if any)
set -euo pipefail

check_only=false
[[ "${1:-}" == "-check" ]] && check_only=true

# package:probe — the probe is a command on PATH, or an absolute path.
PACKAGES=(
	make:make git:git curl:curl
	# hack/protoc.sh: protoc and the well-known types under /usr/include
	protobuf-compiler:protoc libprotobuf-dev:/usr/include/google/protobuf/timestamp.proto
	# the VM layer: QEMU, and what hack/vm-assets.sh builds the guest with
	qemu-system-x86:qemu-system-x86_64 qemu-utils:qemu-img cpio:cpio busybox-static:/bin/busybox
	debootstrap:debootstrap e2fsprogs:debugfs zstd:zstd binutils:readelf lz4:lz4 xz-utils:xz
	# hack/qemu-bundle.sh: the agent image's QEMU, made relocatable
	patchelf:patchelf
	# namespaces, the cluster harness's bridge and kube-proxy
	iproute2:ip iptables:iptables-save util-linux:unshare
	# the shim's tests: runc (the baseline handler) and the CNI plugins
	runc:runc containernetworking-plugins:/usr/lib/cni/bridge
	# the guest agent's tests: Debian's python3 with matplotlib (figures) and pandas (tables),
	# TypeScript for the typescript contexts (on the Node the README names)
	python3:/usr/bin/python3 python3-matplotlib:/usr/lib/python3/dist-packages/matplotlib
	python3-pandas:/usr/lib/python3/dist-packages/pandas
	node-typescript:/usr/share/nodejs/typescript
	# the juicefs store's live volume: Redis as JuiceFS's metadata engine
	redis-server:redis-server
)

missing=()
for entry in "${PACKAGES[@]}"; do
	pkg="${entry%%:*}" probe="${entry#*:}"
	if [[ "$probe" == /* ]]; then
		[[ -e "$probe" ]] && continue
	else
		command -v "$probe" >/dev/null && continue
	fi
	missing+=("$pkg")
done

if ((${#missing[@]})); then
	if $check_only; then
		echo "deps: missing Debian packages: ${missing[*]} (run hack/deps.sh as root)" >&2
		exit 1
	fi
	if ((EUID != 0)); then
		echo "deps: missing Debian packages: ${missing[*]}; run as root: hack/deps.sh" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Not Debian packages here: the README lists them as the prerequisites.
for tool in go:"Go 1.26 at /usr/local/go" kubectl:"kubectl 1.32+" node:"Node 20" npm:"npm (with Node 20)"; do
	name="${tool%%:*}"
	command -v "$name" >/dev/null || { echo "deps: $name not found: install ${tool#*:}" >&2; exit 1; }
done
$check_only || echo "deps: all present"

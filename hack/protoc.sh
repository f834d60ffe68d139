#!/usr/bin/env bash
# Generates Go (protoc-gen-go) and Connect (protoc-gen-connect-go) code for
# guest/proto into guest/envdpb, and Go + ttrpc code for the shim's control
# API in api/node/controlapi. Plugins come from go.mod's tool block; protoc and
# the well-known types from Debian's protobuf-compiler and libprotobuf-dev
# (hack/deps.sh). Everything is generated into a temporary directory first:
# the checked-in files are replaced only when every step succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc not found: run hack/deps.sh (apt-get install protobuf-compiler)" >&2; exit 1; }
[[ -f /usr/include/google/protobuf/timestamp.proto ]] ||
	{ echo "google/protobuf/*.proto not found under /usr/include: run hack/deps.sh (apt-get install libprotobuf-dev)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
bin="$tmp/bin" envd="$tmp/envdpb" ctl="$tmp/controlapi"
mkdir -p "$bin" "$envd" "$ctl"
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-connect-go" connectrpc.com/connect/cmd/protoc-gen-connect-go
go build -o "$bin/protoc-gen-go-ttrpc" github.com/containerd/ttrpc/cmd/protoc-gen-go-ttrpc
PATH="$bin:$PATH" protoc -I guest/proto -I /usr/include \
	--go_out="$envd" --go_opt=module=github.com/sandlot-dev/sandlot/guest/envdpb \
	--connect-go_out="$envd" --connect-go_opt=module=github.com/sandlot-dev/sandlot/guest/envdpb \
	process/process.proto filesystem/filesystem.proto
PATH="$bin:$PATH" protoc -I api/node/controlapi \
	--go_out="$ctl" --go_opt=paths=source_relative \
	--go-ttrpc_out="$ctl" --go-ttrpc_opt=paths=source_relative \
	control.proto
# Every step passed: swap the new files in.
rm -rf guest/envdpb
cp -r "$envd" guest/envdpb
rm -f api/node/controlapi/*.pb.go
cp "$ctl"/*.pb.go api/node/controlapi/

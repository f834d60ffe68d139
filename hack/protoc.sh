#!/usr/bin/env bash
# Generates Go (protoc-gen-go) and Connect (protoc-gen-connect-go) code for
# guest/proto into guest/envdpb, and Go + ttrpc code for the shim's control
# API in shim/controlapi. Plugins come from go.mod's tool block;
# protoc from Debian's protobuf-compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-connect-go" connectrpc.com/connect/cmd/protoc-gen-connect-go
rm -rf guest/envdpb
mkdir -p guest/envdpb
PATH="$bin:$PATH" protoc -I guest/proto -I /usr/include \
	--go_out=guest/envdpb --go_opt=module=github.com/sandlot-dev/sandlot/guest/envdpb \
	--connect-go_out=guest/envdpb --connect-go_opt=module=github.com/sandlot-dev/sandlot/guest/envdpb \
	process/process.proto filesystem/filesystem.proto
go build -o "$bin/protoc-gen-go-ttrpc" github.com/containerd/ttrpc/cmd/protoc-gen-go-ttrpc
rm -f shim/controlapi/*.pb.go
PATH="$bin:$PATH" protoc -I shim/controlapi \
	--go_out=shim/controlapi --go_opt=paths=source_relative \
	--go-ttrpc_out=shim/controlapi --go-ttrpc_opt=paths=source_relative \
	control.proto

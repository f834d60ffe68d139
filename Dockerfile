# sandlot's images for users with Docker; `make image` builds the same
# layout without it. One stage per image:
#
#   docker build --target controller -t sandlot/sandlot-controller:0.1.0 .
#   docker build --target api        -t sandlot/sandlot-api:0.1.0 .
#   docker build --target agent      -t sandlot/sandlot-agent:0.1.0 .
#
# The agent image carries what its install step copies onto nodes: the
# shim, and the guest kernel and initramfs that `make vm-assets` builds
# (as root, with Debian's tools): copy them into .vm/ first —
#   source ~/.cache/sandlot/vm/current.env
#   mkdir -p .vm && cp "$SANDLOT_VM_KERNEL" .vm/vmlinux && cp "$SANDLOT_VM_INITRD" .vm/initramfs.cpio.gz
# and the QEMU bundle the install step puts on each node (chart value
# node.qemu empty; hack/qemu-bundle.sh, Debian's QEMU made relocatable):
#   cp -r "$(hack/qemu-bundle.sh | tail -1)" .vm/qemu
# The agent runs the node's own systemctl, and QEMU, chrooted in the
# node's / (mounted at /host).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
RUN for b in sandlot-controller sandlot-api sandlot-agent containerd-shim-sandlot-v2; do \
      go build -trimpath -ldflags='-s -w' -o /out/$b ./cmd/$b || exit 1; done

FROM scratch AS controller
COPY --from=build /out/sandlot-controller /sandlot-controller
USER 65532:65532
ENTRYPOINT ["/sandlot-controller"]

FROM scratch AS api
COPY --from=build /out/sandlot-api /sandlot-api
USER 65532:65532
ENTRYPOINT ["/sandlot-api"]

FROM scratch AS agent
COPY --from=build /out/sandlot-agent /sandlot-agent
COPY --from=build /out/containerd-shim-sandlot-v2 /opt/sandlot/bin/containerd-shim-sandlot-v2
COPY .vm/vmlinux .vm/initramfs.cpio.gz /opt/sandlot/vm/
COPY .vm/qemu/ /opt/sandlot/qemu/
ENTRYPOINT ["/sandlot-agent"]

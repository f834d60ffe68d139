# sandlot — see README.md. `make` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

export GOFLAGS ?= -buildvcs=false
SANDLOT_CACHE ?= $(HOME)/.cache/sandlot
export SANDLOT_CACHE
K8S_VERSION ?= v1.37.2
ENVTEST_ASSETS := $(SANDLOT_CACHE)/k8s/$(K8S_VERSION)
CONTROLLER_GEN := go tool controller-gen
BINARIES := sandlot-controller sandlot-agent sandlot-api sandlot-guest containerd-shim-sandlot-v2 kubectl-sandlot
# The release version: the Helm chart's appVersion, stamped into every
# binary (--version), the guest agent in the initramfs and the images' tag.
APP_VERSION := $(shell awk '/^appVersion:/ { gsub(/"/, "", $$2); print $$2 }' charts/sandlot/Chart.yaml)
GO_LDFLAGS := -s -w -X github.com/sandlot-dev/sandlot/internal/version.Version=$(APP_VERSION)
GENERATED := api config guest/envdpb charts
space := $(subst ,, )

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install the Debian packages the builds and tests need (only what is missing; root).
	hack/deps.sh

.PHONY: generate
generate: ## Generate deepcopy code for api/, the envd Connect code for guest/ and the shim control API.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	hack/protoc.sh

.PHONY: manifests
manifests: ## Generate CRDs and RBAC (controller, API) into config/, and the Helm chart's copies (plus the agent's RBAC).
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=sandlot-controller paths=./controllers/... output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) rbac:roleName=sandlot-api paths=./e2b/... output:rbac:artifacts:config=config/api
	@# The Helm chart takes its CRDs and RBAC rules from the same output, never a hand copy.
	$(CONTROLLER_GEN) rbac:roleName=sandlot-agent paths=./nodeagent/... output:rbac:artifacts:config=charts/sandlot/files/agent
	rm -f charts/sandlot/files/crds/*.yaml
	cp config/crd/bases/*.yaml charts/sandlot/files/crds/
	cp config/rbac/role.yaml charts/sandlot/files/controller-role.yaml
	cp config/api/role.yaml charts/sandlot/files/api-role.yaml

.PHONY: build
build: ## Build the binaries into bin/.
	@mkdir -p bin
	for b in $(BINARIES); do CGO_ENABLED=0 go build -trimpath -ldflags '$(GO_LDFLAGS)' -o bin/$$b ./cmd/$$b; done

.PHONY: envtest-assets
envtest-assets: ## Build etcd and kube-apiserver from Go modules into the cache (skips what exists).
	K8S_VERSION=$(K8S_VERSION) hack/k8s-bins.sh

.PHONY: vm-assets
vm-assets: ## Build the guest kernel, initramfs and base disks into the cache (root; skips what exists).
	hack/vm-assets.sh

# The suites that need no VM, cluster or store assets: unit tests and the
# envtest suites (a real kube-apiserver + etcd). The tooling in internal/ that
# runs containerd or MinIO is tested with the rest (make test, test-shim,
# test-agent).
UNIT_TESTS = $$(go list ./... | grep -v '/test/\|/nodeagent/store$$\|/internal/\(crienv\|oci\|minio\)$$') ./test/admission/ ./test/chart/ ./test/kube/
# The suites that each load both cores (the fleet simulation, VMs, shims,
# clusters): alone, one package at a time, after the rest.
HEAVY_TESTS := scale vm shim e2e agent jfsagent lifecycle e2b isolation network upgrade drain soak
HEAVY_PATTERN := /test/\($(subst $(space),\|,$(HEAVY_TESTS))\|release\)$$

.PHONY: test-unit
test-unit: envtest-assets ## Unit and envtest suites only (no VM, cluster or store assets): the quick check before a commit.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -count=1 -timeout 20m $(UNIT_TESTS)

.PHONY: test
test: deps envtest-assets vm-assets cluster-bins minio-bins juicefs-bins e2b-venv ## Every test: unit, envtest (real kube-apiserver + etcd), guest (real E2B SDK), VM (real QEMU), store (real MinIO, a live JuiceFS), shim (real containerd + CNI + QEMU), and the cluster suites (real two-node clusters, sandlot installed by its chart). Runs every group even after one fails.
	@status=0; \
	$(MAKE) --no-print-directory test-unit || status=1; \
	rest="$$(go list ./nodeagent/store/ ./internal/... ./test/... | grep -v '$(HEAVY_PATTERN)' | grep -vxF "$$(go list $(UNIT_TESTS))")"; \
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -count=1 -timeout 20m $$rest || status=1; \
	previous="$$(hack/previous-release.sh | tail -n1)" || status=1; \
	SANDLOT_PREVIOUS_RELEASE="$$previous" KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -count=1 -p 1 -timeout 60m $(addprefix ./test/,$(addsuffix /,$(HEAVY_TESTS))) || status=1; \
	if [[ $$status != 0 ]]; then echo "make test: a group failed (above)"; fi; exit $$status

.PHONY: image
image: build vm-assets ## Build the sandlot images (controller, API, agent with the QEMU bundle) as OCI archives in bin/images/, without Docker.
	qemu=$$(hack/qemu-bundle.sh | tail -1) && source $(SANDLOT_CACHE)/vm/current.env && go run ./hack/images -bin bin \
		-kernel "$$SANDLOT_VM_KERNEL" -initrd "$$SANDLOT_VM_INITRD" -qemu "$$qemu" -tag $(APP_VERSION) -o bin/images

.PHONY: qemu-bundle
qemu-bundle: ## Make the QEMU the agent image ships (Debian's, with its libraries, loader and firmware) relocatable, into the cache (skips what exists).
	hack/qemu-bundle.sh

.PHONY: release
release: build image ## A release folder dist/$(VERSION)/ (image archives, the packaged chart, the kubectl plugin, SHA256SUMS) for VERSION=x.y.z, which must be the chart's version and appVersion and have a CHANGELOG section; REGISTRY=host[:port][/path] pushes the images (PLAIN_HTTP=1 for a registry without TLS).
	@[[ -n "$(VERSION)" ]] || { echo "make release: set VERSION=x.y.z (charts/sandlot/Chart.yaml's version and appVersion)"; exit 2; }
	go run ./hack/release -version $(VERSION) -o dist/$(VERSION) $(if $(REGISTRY),-registry $(REGISTRY)) $(if $(PLAIN_HTTP),-plain-http)

.PHONY: test-chart
test-chart: envtest-assets ## The Helm chart (lint, renders per storage mode, schema, RBAC from config/; install, upgrade with a CRD change, refused upgrades and uninstall on a real kube-apiserver) and the node installer; no nodes.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -count=1 ./test/chart/ ./nodeagent/install/ ./cmd/sandlot-agent/

test-shim: vm-assets containerd-bins ## The shim under a real containerd (CRI, CNI bridge) with real QEMU: pods as VMs, snapshots, restarts, faults.
	go test -count=1 -v -timeout 20m ./shim/... ./internal/crienv/ ./test/shim/

.PHONY: lint
lint: ## gofmt, go vet and the layout rules of CONTRIBUTING.md (hack/lint-layout.sh; LINT_BASE=<ref>: commit subjects too).
	@out="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	hack/lint-layout.sh

.PHONY: verify
verify: lint ## Fail if generated files or go.mod drift from their sources.
	go mod tidy -diff
	$(MAKE) generate manifests
	@if ! git diff --quiet -- $(GENERATED); then \
		echo "generated files drifted; run 'make generate manifests' and commit:"; \
		git --no-pager diff --stat -- $(GENERATED); exit 1; fi
	@if [[ -n "$$(git ls-files --others --exclude-standard -- $(GENERATED))" ]]; then \
		echo "untracked generated files:"; git ls-files --others --exclude-standard -- $(GENERATED); exit 1; fi

.PHONY: bench-scale
bench-scale: cluster-bins vm-assets ## The control plane at fleet size: sandlot-controller and sandlot-api as the chart installs them on a one-node cluster, a simulated fleet whose agents run on the real agent's cache options (10,000 sandboxes over 1,000 nodes at 100 creates/s; BENCH_ARGS to shorten, -agent-caches all for unselected watches).
	go run ./test/bench/scale $(BENCH_ARGS)

.PHONY: test-guest
test-guest: ## The guest agent driven by the real E2B SDKs (needs root, node, npm, python3).
	go test -count=1 -v -timeout 10m ./test/guest/

.PHONY: bench-guest
bench-guest: ## SDK round trips to the guest agent vs the same operations on the host.
	go run ./test/bench/guest

.PHONY: test-vm
test-vm: vm-assets ## The VM layer on real QEMU (TCG here): boot, snapshot, clones, pause, faults.
	go test -count=1 -v -timeout 20m ./vm/... ./test/vm/...

.PHONY: bench-flood
bench-flood: vm-assets containerd-bins ## A flooding guest against its shim: app stdout, exec stdout and stderr nobody reads, then containerd stopped; shim RSS and cgroup memory sampled for 5 minutes beside a quiet sandbox's shim (BENCH_ARGS=-duration 1m).
	go run ./test/bench/flood $(BENCH_ARGS)

.PHONY: bench-vm
bench-shim: vm-assets containerd-bins ## Pod start to first answer under containerd: sandlot cold boot and restore vs runc, single and 10 concurrent (BENCH_ARGS=-json).
	go run ./test/bench/shim $(BENCH_ARGS)

bench-vm: vm-assets ## VM layer timings and memory, with the bare-QEMU floor in the same run (BENCH_ARGS=-json).
	go run ./test/bench/vm $(BENCH_ARGS)

.PHONY: minio-bins
minio-bins: ## Build the MinIO server (the s3 store's tests run against it) from Go modules into the cache.
	hack/minio-bins.sh

.PHONY: registry-bins
registry-bins: ## Build the CNCF Distribution registry (a local cluster's, the release tests') from Go modules into the cache.
	hack/registry-bins.sh

.PHONY: juicefs-bins
juicefs-bins: vm-assets ## Build the JuiceFS client v1.2.5, the JuiceFS CSI driver v0.32.4 and its node registrar v2.17.0 (and their image) from the upstream sources in ../shared/thirdparty (SANDLOT_THIRDPARTY) into the cache: the juicefs store's live volume in the tests and STORE=juicefs make up.
	hack/juicefs-bins.sh csi

.PHONY: coredns-bins
coredns-bins: ## Build CoreDNS (the local clusters' DNS behind kube-dns) from the Go module proxy into the cache.
	hack/coredns-bins.sh

.PHONY: cluster-bins
cluster-bins: containerd-bins coredns-bins registry-bins ## Build etcd and the Kubernetes components (apiserver, controller-manager, scheduler, kubelet, kube-proxy), CoreDNS and the OCI registry the kubelets pull sandlot's images from into the cache.
	K8S_VERSION=$(K8S_VERSION) hack/k8s-bins.sh kube-controller-manager kube-scheduler kubelet kube-proxy

.PHONY: up
up: deps build image cluster-bins vm-assets minio-bins ## A local cluster running sandlot, installed with its Helm chart (s3 store on a local MinIO; STORE=juicefs: a live JuiceFS through its CSI driver) (NODES=2 for two nodes); idempotent. Prints the kubeconfig.
ifeq ($(STORE),juicefs)
	$(MAKE) juicefs-bins
endif
	go build -o bin/sandlot-cluster ./hack/cluster
	bin/sandlot-cluster up -nodes $${NODES:-1} -store $${STORE:-s3}

.PHONY: dashboard-png
dashboard-png: build ## Render the chart's Grafana dashboard from a real run to docs/dashboard.png: on a running `NODES=2 make up` cluster, a Prometheus (built from Go modules) scrapes sandlot while a workload creates, snapshots, clones, pauses and resumes sandboxes (about 10 min; it applies the quickstart sample and leaves it).
	go run ./hack/dashboard -prometheus "$$(hack/prometheus-bins.sh | tail -1)/prometheus"

.PHONY: test-e2e
test-e2e: build cluster-bins vm-assets ## End to end on a real two-node cluster started for the run: quickstart, placement, cordon, node failure, services.
	go test -count=1 -v -timeout 30m ./test/e2e/

.PHONY: test-agent
test-agent: envtest-assets cluster-bins vm-assets minio-bins juicefs-bins ## The node agent and its store on a real two-node cluster: s3 on MinIO (default), or STORE=juicefs on a live JuiceFS (the store's suites on client mounts; the chart on the JuiceFS CSI driver's volume): snapshots, remote status, pause/resume across nodes, faults, agent pods replaced.
ifeq ($(STORE),juicefs)
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -count=1 -v -timeout 30m ./nodeagent/... ./test/juicefs/ ./test/jfsagent/
else
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -count=1 -v -timeout 30m ./nodeagent/... ./internal/minio/ ./test/agent/
endif

.PHONY: previous-release
previous-release: vm-assets ## Build the previous release (the newest v* tag; PREVIOUS_RELEASE=vX.Y.Z) with its own `make release` in a worktree, into the cache (skips what exists).
	hack/previous-release.sh

.PHONY: test-upgrade
test-upgrade: cluster-bins vm-assets minio-bins previous-release ## The previous release installed on a real two-node cluster with running, paused and snapshotted sandboxes and a warm pool, then helm upgrade to this checkout: everything kept, bases rebuilt for the new guest.
	SANDLOT_PREVIOUS_RELEASE="$$(hack/previous-release.sh | tail -n1)" go test -count=1 -v -timeout 30m ./test/upgrade/

.PHONY: test-drain
test-drain: cluster-bins vm-assets minio-bins ## kubectl drain of a node of a real two-node cluster (s3 on MinIO): its sandboxes (a running process an E2B client follows, a warm pool claim, a paused one, plain ones) move to the other node with ID, memory and files, the drain completes, per-sandbox downtime printed; a drain with nowhere to go is held, each sandbox saying why; a node powered off under an onNodeLost: Restore sandbox.
	go test -count=1 -v -timeout 30m ./test/drain/

.PHONY: soak
SOAK_MIN ?= 30
soak: cluster-bins vm-assets minio-bins ## SOAK_MIN (30) minutes of E2B and kubectl churn on a real two-node cluster while agents, the controller, the API, containerd, MinIO and a kubelet are killed in turn: every operation and leak accounted for; writes docs/soak.png and docs/soak.md. Its 5-minute short form is in make test.
	SOAK_MIN=$(SOAK_MIN) SOAK_LONG=1 SOAK_OUT=$(CURDIR)/docs go test -count=1 -v -timeout $$(( $(SOAK_MIN) + 30 ))m -run TestSoak ./test/soak/

.PHONY: test-lifecycle
test-lifecycle: cluster-bins vm-assets ## Templates that build their base snapshot and sandboxes that restore it, warm pools, fork, rollback, timeouts, template failures, on a real two-node cluster.
	go test -count=1 -v -timeout 30m ./test/lifecycle/

.PHONY: e2e
e2e: ## End to end on a running `NODES=2 make up` cluster: kubectl sandlot, cross-node resume, the E2B SDK through the chart's Service, metrics, restarts, helm upgrade and uninstall.
	go test -count=1 -v -timeout 40m ./test/release/

.PHONY: test-tenant
test-tenant: cluster-bins vm-assets minio-bins ## The sandbox boundary tried as a tenant would (test/isolation; docs/security.md's rows), on a real two-node cluster with two teams and MinIO: API keys of one team against the other's names, keys at rest, allowOut of platform ranges, uploads and builds beyond the limits, an image on an unreachable registry, a claimant's env, jailed QEMUs, full disks and console floods, a VM over its pod's memory, the admission policy as an `edit` user, a tampered bucket, warm pool tokens, credentials through sandlot-api.
	go test -count=1 -v -timeout 30m ./test/isolation/

.PHONY: test-network
test-network: cluster-bins vm-assets ## Each sandbox's network policy tried from inside its VM against a test "internet" (a netns with TEST-NET hosts, a metadata-like server and the pods' DNS) on a real two-node cluster: closed by default, allowOut domains and CIDRs, live edits, pause and fork, spoofed frames.
	go test -count=1 -v -timeout 20m ./test/network/

.PHONY: bench-network
bench-network: cluster-bins vm-assets ## What each sandbox's network filter costs: new-connection latency and TCP throughput from a VM to the test internet with no rules, 100 CIDR rules and 20 domains, beside a bare forward (no filter) in the same run (BENCH_ARGS=-json).
	go run ./test/bench/network $(BENCH_ARGS)

.PHONY: test-e2b
test-e2b: cluster-bins vm-assets e2b-venv ## sandlot-api (the E2B REST facade and sandbox proxy) driven by the real E2B SDKs on a real two-node cluster, in both proxy modes: e2b and @e2b/code-interpreter from npm (node --test), e2b and e2b-code-interpreter from PyPI (pytest, sync and async clients).
	go test -count=1 -v -timeout 30m ./test/e2b/

.PHONY: e2b-venv
e2b-venv: ## The virtualenv of the Python E2B SDK suite: test/e2b/python/requirements.lock from PyPI, into the cache (skips what exists).
	hack/e2b-venv.sh

.PHONY: bench-e2b
bench-e2b: cluster-bins vm-assets ## cube-bench's shape through sandlot-api: create-only and create-delete at c = 1, 10, 20, 50, without a pod, into start slots and with a warm pool, timing create → 201 and create → the first command answered through the proxy, beside a bare-QEMU restore + the same command measured in the same run (BENCH_ARGS=-json).
	go run ./test/bench/e2b $(BENCH_ARGS)

.PHONY: bench-lifecycle
bench-lifecycle: cluster-bins vm-assets ## Create from a template with and without a warm pool at concurrency 1, 10, 20, 50; fork 1 and 100; rollback 1, 5, 10; host memory per running sandbox at 20/50 and per paused clone (a warm pool) at 50/100 (one node; BENCH_ARGS=-json).
	go run ./test/bench/lifecycle $(BENCH_ARGS)

.PHONY: bench-agent
bench-agent: cluster-bins vm-assets minio-bins juicefs-bins ## Snapshot API, remote Ready, pause, local and cross-node start/resume at concurrency 1, 5, 10 (the JuiceFS seed report's tables 4.1-4.4; BENCH_ARGS=-json): local store, then s3 on MinIO; STORE=juicefs: s3, then a live JuiceFS.
ifeq ($(STORE),juicefs)
	go run ./test/bench/agent -store=s3 $(BENCH_ARGS)
	go run ./test/bench/agent -store=juicefs $(BENCH_ARGS)
else
	go run ./test/bench/agent -store=local $(BENCH_ARGS)
	go run ./test/bench/agent -store=s3 $(BENCH_ARGS)
endif

.PHONY: bench-e2e
bench-e2e: cluster-bins vm-assets ## Sandbox create to Running and answering on a real cluster vs a runc pod of the same image, single and 10 concurrent (BENCH_ARGS=-json).
	go run ./test/bench/e2e $(BENCH_ARGS)

.PHONY: down
down: ## Stop the local cluster and undo every host change.
	@if [[ -x bin/sandlot-cluster ]]; then bin/sandlot-cluster down; else go run ./hack/cluster down; fi

.PHONY: containerd-bins
containerd-bins: ## Build containerd, ctr and the runc shim (v2.4.2) from Go modules into the cache.
	hack/containerd-bins.sh

# configstamp — run `make help` for the targets.
SHELL := bash
GO ?= go
BIN := bin
TOOLS := hack/tools.sh
# Tests build the Kubernetes binaries they need (cached outside the clone) unless
# CONFIGSTAMP_BIN_DIR or KUBEBUILDER_ASSETS points at them.
CONFIGSTAMP_BIN_DIR ?=
export CONFIGSTAMP_BIN_DIR
# golangci-lint to run (default: built by hack/tools.sh lint).
CONFIGSTAMP_GOLANGCI_LINT ?=
export CONFIGSTAMP_GOLANGCI_LINT

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_-]+:.*## /{printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The version configstamp reports (--version, its start-up log, configstamp_build_info).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build
build: ## Build bin/configstamp.
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/configstamp ./cmd/configstamp

.PHONY: lint
lint: ## go vet and gofmt of everything; golangci-lint (.golangci.yml, complexity over 30 fails) of product code and hack/image; actionlint of .github/workflows, whose actions must be pinned by commit SHA and whose Go must be go.mod's (latest patch).
	$(GO) vet ./...
	$(GO) -C test/monitoring vet ./...
	$(GO) -C hack/image vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi
	@big=$$(git ls-files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null | awk '$$1 > 1048576 {print $$2}'); if [ -n "$$big" ]; then echo "tracked files over 1 MiB (binaries or data a script can make belong outside Git):"; echo "$$big"; exit 1; fi
	@bad=$$(grep -nE '^[[:space:]-]*uses:' .github/workflows/*.y*ml | grep -vE 'uses: [^@ ]+@[0-9a-f]{40}([[:space:]]|$$)' || true); if [ -n "$$bad" ]; then echo "actions not pinned by a full commit SHA:"; echo "$$bad"; exit 1; fi
	@go=$$(awk '$$1 == "go" {split($$2, v, "."); print v[1] "." v[2]}' go.mod); bad=$$(grep -n 'go-version:' .github/workflows/*.y*ml | grep -vF "go-version: \"$$go\"" || true); \
	  if [ -n "$$bad" ]; then echo "workflows must set up go.mod's Go, go-version: \"$$go\":"; echo "$$bad"; exit 1; fi
	@set -e; lint=$${CONFIGSTAMP_GOLANGCI_LINT:-$$(bash $(TOOLS) lint | tail -1)/golangci-lint}; \
	  actionlint=$$(dirname "$$lint")/actionlint; [ -x "$$actionlint" ] || actionlint=$$(bash $(TOOLS) lint | tail -1)/actionlint; \
	  set -x; "$$lint" run ./...; cd hack/image && "$$lint" run ./... && cd ../.. && "$$actionlint" -no-color

.PHONY: tools
tools: ## Build the control-plane binaries the integration tests need.
	bash $(TOOLS) control-plane

.PHONY: tools-e2e
tools-e2e: ## Build every binary the end-to-end tests and the demo need.
	bash $(TOOLS) e2e

.PHONY: test-unit
test-unit: ## Unit tests of the pure logic, and the docs' checks (links, make targets, flags and values references).
	$(GO) test -short -count=1 ./stamp/... ./webhook/... ./watcher/... ./certs/... ./internal/... ./cmd/... ./test/docs/... ./test/internal/...

.PHONY: docs
docs: ## Regenerate docs/reference/flags.md and cli.md from the server's flags and the command-line tools'.
	CONFIGSTAMP_WRITE_DOCS=1 $(GO) test -count=1 -run '^Test(Flags|CLI)Reference$$' ./cmd/configstamp

.PHONY: test-integration
test-integration: ## Integration tests against a real kube-apiserver + etcd.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) control-plane | tail -1)} \
	  $(GO) test -count=1 -timeout 20m ./test/integration/...

.PHONY: test-e2e
test-e2e: ## End-to-end: real rollouts (controller-manager, scheduler, kwok) with real helm, helmfile, kubectl.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) test -count=1 -timeout 30m ./test/e2e/...

.PHONY: test-precision
test-precision: ## Exactly-once rollouts counted as ReplicaSets, on Deployments installed over and created after.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) test -count=1 -timeout 20m ./test/precision/...

.PHONY: test-kinds
test-kinds: ## Exactly-once rollouts of StatefulSets, DaemonSets, Argo Rollouts, workloads opted in by label, extra sources; Flux HelmRelease reconcile requests.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) test -count=1 -timeout 20m ./test/kinds/...

.PHONY: test-secrets
test-secrets: ## Secrets: off reads none (audit log), cert-manager renewals and key selection roll once, keyed digests, key kept across restarts.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) test -count=1 -timeout 20m ./test/secrets/...

.PHONY: test-waves
test-waves: ## Health-gated waves: a bad shared ConfigMap change halts at its canary, the fix rolls wave by wave, each workload once, across a SIGKILL; on by namespace label and Secret annotation, off, DaemonSets, Argo Rollouts, the waves deadline, applied objects.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) test -count=1 -timeout 15m ./test/waves/...

.PHONY: test-deploy
test-deploy: ## Chart tests: rendered objects, install with real helm, RBAC sufficiency, cert-manager CRDs.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) test -count=1 -timeout 20m ./test/deploy/...

.PHONY: test-monitoring
test-monitoring: ## The chart's alerts and dashboard: Prometheus's rule parser, PromQL parser and engine; the metric names they use.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) -C test/monitoring test -count=1 ./...

.PHONY: test-badinput
test-badinput: ## Bad input against the real API server: malformed reviews, huge and odd ConfigMaps and Secrets, odd pod specs.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) test -count=1 -timeout 20m ./test/badinput/...

.PHONY: test-security
test-security: ## Forged reviews posted straight to the webhook port: no read or log outside the scope (audit log), memory under the chart's limit in a flood, real creates still stamped, no digest oracle.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) control-plane | tail -1)} \
	  $(GO) test -count=1 -timeout 10m ./test/security/...

.PHONY: test-faults
test-faults: ## Faults in a real control plane (API server restart, etcd pause, leader kill, slow webhook, 429/5xx, competing writers), each ending in an exactly-once check.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) test -count=1 -timeout 30m ./test/faults/...

.PHONY: test-cli
test-cli: ## The command-line tools (explain, impact, hash, the kubectl plugin) against a real kube-apiserver + etcd, golden outputs.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) control-plane | tail -1)} \
	  $(GO) test -count=1 -timeout 15m ./test/cli/...

.PHONY: test-image
test-image: ## make image built twice and opened: reproducible, both architectures, user, entrypoint, labels, static binaries reporting make build's version; the Dockerfile equivalent.
	$(GO) -C hack/image test -count=1 ./...

.PHONY: manifests
# The base is for API servers that serve ValidatingAdmissionPolicies (1.30 and later), so
# it carries the self policy (helm template alone does not know they are served).
manifests: ## Regenerate the kustomize base from the Helm chart.
	{ echo "# Generated by 'make manifests' from deploy/helm/configstamp: edit the chart, not this file."; \
	  $$(bash $(TOOLS) e2e | tail -1)/helm template configstamp deploy/helm/configstamp --namespace configstamp-system \
	    --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy; } \
	  > deploy/kustomize/configstamp.yaml

# make test runs the suites TEST_JOBS at a time (each on its own control plane, on its
# own free ports and temporary directories), longest first so the schedule packs well;
# lint and the unit tests, which only need CPU, come last. The binaries are built (or
# found) once, before, so no two hack/tools.sh runs race on the same file. Each
# target's output is printed whole when it ends; a failing one stops none of the others
# (make test fails at the end). (As the recipe calls $(MAKE), even
# make -n test runs it, hack/tools.sh included.)
TEST_JOBS ?= 3
TEST_ORDER := test-faults test-precision test-integration test-secrets test-kinds test-e2e \
  test-waves test-deploy test-security test-badinput test-cli test-monitoring test-image lint test-unit
.PHONY: test
test: ## Everything, TEST_JOBS (3) at a time: lint, unit, integration, end-to-end, precision, kinds, waves, Secrets, bad input, security, faults, command-line and chart tests, alerts and dashboard, the image.
	@set -eo pipefail; \
	bins=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)}; \
	lint=$${CONFIGSTAMP_GOLANGCI_LINT:-$$(bash $(TOOLS) lint | tail -1)/golangci-lint}; \
	start=$$(date +%s); \
	$(MAKE) --no-print-directory --keep-going -j$(TEST_JOBS) --output-sync=target \
	  CONFIGSTAMP_BIN_DIR="$$bins" CONFIGSTAMP_GOLANGCI_LINT="$$lint" $(TEST_ORDER); \
	echo "make test: passed in $$(( $$(date +%s) - start ))s, $(TEST_JOBS) at a time"

BENCH_COUNT ?= 6
.PHONY: bench
bench: ## Go benchmarks (benchstat-friendly): references, hashing, the admission handler.
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./stamp/... ./webhook/...

FUZZTIME ?= 1m
FUZZ_TARGETS := FuzzHandler:./webhook FuzzConsumed:./stamp FuzzEncoding:./stamp
.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 1m); the seed corpora run in test-unit.
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "== $${t%%:*} ($${t#*:}) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) $${t#*:}; \
	done

SCALE_FLAGS ?=
.PHONY: bench-scale
bench-scale: ## Scale measurements against a local control plane (see BENCHMARKS.md); SCALE_FLAGS=-quick for a short run.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) controllers | tail -1)} \
	  $(GO) run ./test/scale $(SCALE_FLAGS)

SOAK_FLAGS ?=
.PHONY: soak
soak: ## Soak: 10,000 Deployments and ConfigMaps, random edits for 20 minutes; RSS, goroutines, open files, exactly-once (see RELIABILITY.md); SOAK_FLAGS to change.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) control-plane | tail -1)} \
	  $(GO) run ./test/soak $(SOAK_FLAGS)

.PHONY: demo
demo: ## A local control plane, configstamp on it, a ConfigMap edit rolling a Deployment.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) controllers | tail -1)} \
	  $(GO) run ./test/demo

# Release inputs. VERSION (above) is the one place a release's version comes from: the
# binary's -X main.version, the image's labels and layout name, the chart's appVersion
# and (without its v) the chart's version. The rest default from git, so the same commit
# gives the same image digests.
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# The image's CA bundle: empty for Mozilla's roots as hack/image's go.sum pins them (the
# same on every machine); a PEM file's path to ship that one instead.
CA_BUNDLE ?=
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
# A release's chart is versioned X.Y.Z from VERSION vX.Y.Z; any other VERSION packages 0.0.0-dev.
CHART_VERSION ?= $(shell v='$(VERSION)'; if [[ $$v =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$ ]]; then echo "$${v#v}"; else echo 0.0.0-dev; fi)
export SOURCE_DATE_EPOCH

.PHONY: image
image: ## Multi-arch OCI image (IMAGE_PLATFORMS) from scratch, no Docker: OCI layout bin/image, reproducible (SOURCE_DATE_EPOCH).
	@set -e; bins=(); for p in $(IMAGE_PLATFORMS); do \
	  out="$(abspath $(BIN))/$${p%/*}_$${p#*/}/configstamp"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -buildvcs=false \
	    -ldflags "-s -w -X main.version=$(VERSION)" -o "$$out" ./cmd/configstamp; \
	  bins+=(-binary "$$p=$$out"); done; \
	$(GO) -C hack/image run . -out "$(abspath $(BIN))/image" -version '$(VERSION)' -revision '$(REVISION)' \
	  -created '$(SOURCE_DATE_EPOCH)' -ca-bundle '$(CA_BUNDLE)' "$${bins[@]}"

.PHONY: sbom
sbom: image ## SPDX SBOM of each platform of bin/image, with syft (built by hack/tools.sh sbom): bin/sbom-OS_ARCH.spdx.json.
	@set -e; syft=$$(bash $(TOOLS) sbom | tail -1)/syft; for p in $(IMAGE_PLATFORMS); do \
	  SYFT_CHECK_FOR_APP_UPDATE=false "$$syft" scan -q "oci-dir:$(BIN)/image" --platform "$$p" \
	    --source-name configstamp --source-version '$(VERSION)' -o "spdx-json=$(BIN)/sbom-$${p%/*}_$${p#*/}.spdx.json"; \
	  echo "$(BIN)/sbom-$${p%/*}_$${p#*/}.spdx.json"; done

.PHONY: chart-package
chart-package: ## The chart packaged as bin/chart/configstamp-CHART_VERSION.tgz, appVersion VERSION (the image's tag); helm from CONFIGSTAMP_BIN_DIR if set.
	@set -e; helm=$${CONFIGSTAMP_BIN_DIR:+$$CONFIGSTAMP_BIN_DIR/helm}; [ -x "$$helm" ] || helm=$$(bash $(TOOLS) helm | tail -1)/helm; \
	  "$$helm" package deploy/helm/configstamp --version '$(CHART_VERSION)' --app-version '$(VERSION)' -d $(BIN)/chart

.PHONY: release-version
release-version: ## Fails unless VERSION is a release's, vX.Y.Z or vX.Y.Z-PRERELEASE (what CHART_VERSION takes); prints the chart version.
	@if [ '$(CHART_VERSION)' = 0.0.0-dev ]; then echo "VERSION $(VERSION) is not vX.Y.Z or vX.Y.Z-PRERELEASE" >&2; exit 1; fi; echo '$(CHART_VERSION)'

.PHONY: release-notes
release-notes: ## CHANGELOG.md's section of VERSION (vX.Y.Z; [Unreleased] for any other) into bin/release-notes.md.
	@mkdir -p $(BIN); v='$(VERSION)'; if [[ $$v =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]]; then s="$${v#v}"; else s=Unreleased; fi; \
	awk -v s="[$$s]" '/^## /{on = (index($$0, "## " s) == 1); next} on' CHANGELOG.md > $(BIN)/release-notes.md; \
	if ! grep -q '[^[:space:]]' $(BIN)/release-notes.md; then echo "CHANGELOG.md has no section [$$s] (or it is empty)" >&2; exit 1; fi; \
	cat $(BIN)/release-notes.md

IMG ?= configstamp:dev
.PHONY: docker-build
docker-build: ## Build the container image with Docker (needs a Docker engine; make image is the source of truth).
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
	  --build-arg CREATED=$$(date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ) -t $(IMG) .

.PHONY: run
run: ## Run configstamp against KUBECONFIG (dev mode: registers itself at https://127.0.0.1:9443).
	$(GO) run ./cmd/configstamp --kubeconfig $${KUBECONFIG:-$$HOME/.kube/config} \
	  --dev-webhook-url https://127.0.0.1:9443 --metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081 \
	  --hash-key $${CONFIGSTAMP_HASH_KEY:-default/configstamp-hash-key}

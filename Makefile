# configstamp — run `make help` for the targets.
SHELL := bash
GO ?= go
BIN := bin
TOOLS := hack/tools.sh
# Tests build the Kubernetes binaries they need (cached outside the clone) unless
# CONFIGSTAMP_BIN_DIR or KUBEBUILDER_ASSETS points at them.
CONFIGSTAMP_BIN_DIR ?=
export CONFIGSTAMP_BIN_DIR

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_-]+:.*## /{printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/configstamp.
	$(GO) build -o $(BIN)/configstamp ./cmd/configstamp

.PHONY: lint
lint: ## go vet and gofmt.
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi

.PHONY: tools
tools: ## Build the control-plane binaries the integration tests need.
	bash $(TOOLS) control-plane

.PHONY: tools-e2e
tools-e2e: ## Build every binary the end-to-end tests and the demo need.
	bash $(TOOLS) e2e

.PHONY: test-unit
test-unit: ## Unit tests of the pure logic.
	$(GO) test -short -count=1 ./stamp/... ./webhook/... ./watcher/... ./certs/... ./cmd/...

.PHONY: test-integration
test-integration: ## Integration tests against a real kube-apiserver + etcd.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) control-plane | tail -1)} \
	  $(GO) test -count=1 -timeout 20m ./test/integration/...

.PHONY: test-e2e
test-e2e: ## End-to-end: real rollouts (controller-manager, scheduler, kwok) with real helm, helmfile, kubectl.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) test -count=1 -timeout 30m ./test/e2e/...

.PHONY: test
test: lint test-unit test-integration test-e2e ## Everything: lint, unit, integration and end-to-end tests.

.PHONY: demo
demo: ## A local control plane, configstamp on it, a ConfigMap edit rolling a Deployment.
	CONFIGSTAMP_BIN_DIR=$${CONFIGSTAMP_BIN_DIR:-$$(bash $(TOOLS) e2e | tail -1)} \
	  $(GO) run ./test/demo

IMG ?= configstamp:dev
.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine).
	docker build -t $(IMG) .

.PHONY: run
run: ## Run configstamp against KUBECONFIG (dev mode: registers itself at https://127.0.0.1:9443).
	$(GO) run ./cmd/configstamp --kubeconfig $${KUBECONFIG:-$$HOME/.kube/config} \
	  --dev-webhook-url https://127.0.0.1:9443 --metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081

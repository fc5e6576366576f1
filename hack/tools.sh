#!/usr/bin/env bash
# tools.sh builds the Kubernetes binaries the tests need from the Go module proxy and
# caches them outside the clone, keyed by version, so a fresh clone reuses them.
#
#   hack/tools.sh [control-plane|controllers|e2e|helm|lint|sbom]   (default: control-plane)
#
#   control-plane  etcd, kube-apiserver (integration tests, bench-scale)
#   controllers    + kube-controller-manager, kube-scheduler, kwok (demo)
#   e2e            + helm, helmfile (end-to-end and chart tests)
#   helm           helm alone (make chart-package)
#   lint           golangci-lint, actionlint (make lint)
#   sbom           syft (make sbom)
#
# Prints the directory holding the binaries on its last line. When KUBEBUILDER_ASSETS is
# set and holds etcd and kube-apiserver, the control-plane set is taken from there.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
HELMFILE_VERSION=${HELMFILE_VERSION:-v1.8.0}
GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:-v2.15.0}
ACTIONLINT_VERSION=${ACTIONLINT_VERSION:-v1.7.12}
SYFT_VERSION=${SYFT_VERSION:-v1.57.2}

CACHE=${CONFIGSTAMP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configstamp}
BIN="$CACHE/bin"
WORK="$CACHE/work"
mkdir -p "$BIN" "$WORK"
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0

log() { echo "tools: $*" >&2; }

# want NAME VERSION: true when the versioned binary is missing.
want() { [ ! -x "$BIN/$1-$2" ]; }
link() { ln -sf "$1-$2" "$BIN/$1"; }

kube() {
  local names=("$@") todo=() n
  for n in "${names[@]}"; do want "$n" "$K8S_VERSION" && todo+=("$n"); done
  if [ ${#todo[@]} -gt 0 ]; then
    local d="$WORK/kubernetes-$K8S_VERSION"
    mkdir -p "$d"
    if [ ! -f "$d/go.sum" ] || ! grep -q "k8s.io/kubernetes $K8S_VERSION" "$d/go.mod" 2>/dev/null; then
      log "preparing k8s.io/kubernetes $K8S_VERSION wrapper module"
      (cd "$d" && rm -f go.mod go.sum && go mod init configstamp.local/kubebin >/dev/null 2>&1 \
        && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null)
      local modfile
      modfile="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod"
      {
        echo "require k8s.io/kubernetes $K8S_VERSION"
        # Every staging module k8s.io/kubernetes replaces with ./staging/... is pinned
        # to its published version instead.
        grep -E '^\s*k8s.io/[a-z0-9-]+ => \./staging/' "$modfile" | awk -v v="$STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
      } >> "$d/go.mod"
      (cd "$d" && printf 'package tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' > tools.go && go mod tidy >/dev/null 2>&1 || true)
    fi
    for n in "${todo[@]}"; do
      log "building $n $K8S_VERSION (minutes on a cold cache)"
      (cd "$d" && go build -o "$BIN/$n-$K8S_VERSION" "k8s.io/kubernetes/cmd/$n")
    done
  fi
  for n in "${names[@]}"; do link "$n" "$K8S_VERSION"; done
}

etcd() {
  if want etcd "$ETCD_VERSION"; then
    local d="$WORK/etcd-$ETCD_VERSION"
    mkdir -p "$d"
    log "building etcd $ETCD_VERSION"
    (cd "$d" && { [ -f go.mod ] || go mod init configstamp.local/etcdbin >/dev/null 2>&1; } \
      && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 \
      && go build -o "$BIN/etcd-$ETCD_VERSION" go.etcd.io/etcd/server/v3)
  fi
  link etcd "$ETCD_VERSION"
}

kwok() {
  if want kwok "$KWOK_VERSION"; then
    log "building kwok $KWOK_VERSION"
    GOBIN="$WORK/kwok-$KWOK_VERSION" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    mv "$WORK/kwok-$KWOK_VERSION/kwok" "$BIN/kwok-$KWOK_VERSION"
  fi
  link kwok "$KWOK_VERSION"
  # kwok's "fast" stages ship inside its module; keep a copy beside the binary.
  local stages="$BIN/kwok-stages-$KWOK_VERSION.yaml"
  if [ ! -s "$stages" ]; then
    local m
    m=$(cd "$WORK" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    for f in "$m"/kustomize/stage/node/fast/node-initialize.yaml "$m"/kustomize/stage/node/heartbeat/node-heartbeat.yaml "$m"/kustomize/stage/pod/fast/pod-*.yaml; do
      echo "---"; cat "$f"
    done > "$stages.tmp" && mv "$stages.tmp" "$stages"
  fi
  ln -sf "kwok-stages-$KWOK_VERSION.yaml" "$BIN/kwok-stages.yaml"
}

helm() {
  if want helm "$HELM_VERSION"; then
    log "building helm $HELM_VERSION"
    GOBIN="$WORK/helm-$HELM_VERSION" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    mv "$WORK/helm-$HELM_VERSION/helm" "$BIN/helm-$HELM_VERSION"
  fi
  link helm "$HELM_VERSION"
}

helmfile() {
  if want helmfile "$HELMFILE_VERSION"; then
    local d="$WORK/helmfile-$HELMFILE_VERSION"
    mkdir -p "$d"
    log "building helmfile $HELMFILE_VERSION"
    (cd "$d" && rm -f go.mod go.sum && go mod init configstamp.local/helmfilebin >/dev/null 2>&1 \
      && go mod download -json "github.com/helmfile/helmfile@$HELMFILE_VERSION" >/dev/null)
    local modfile
    modfile="$(go env GOMODCACHE)/cache/download/github.com/helmfile/helmfile/@v/$HELMFILE_VERSION.mod"
    { echo "require github.com/helmfile/helmfile $HELMFILE_VERSION"; grep -E '^replace [^(]' "$modfile" || true
      sed -n '/^replace (/,/^)/p' "$modfile"; } >> "$d/go.mod"
    (cd "$d" && printf 'package tools\n\nimport _ "github.com/helmfile/helmfile"\n' > tools.go && go mod tidy >/dev/null 2>&1 || true
     go build -o "$BIN/helmfile-$HELMFILE_VERSION" github.com/helmfile/helmfile)
  fi
  link helmfile "$HELMFILE_VERSION"
}

golangci_lint() {
  if want golangci-lint "$GOLANGCI_LINT_VERSION"; then
    log "building golangci-lint $GOLANGCI_LINT_VERSION"
    GOBIN="$WORK/golangci-lint-$GOLANGCI_LINT_VERSION" \
      go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
    mv "$WORK/golangci-lint-$GOLANGCI_LINT_VERSION/golangci-lint" "$BIN/golangci-lint-$GOLANGCI_LINT_VERSION"
  fi
  link golangci-lint "$GOLANGCI_LINT_VERSION"
}

# gotool NAME VERSION PACKAGE: go install of a module's command, kept as NAME-VERSION.
gotool() {
  if want "$1" "$2"; then
    log "building $1 $2"
    GOBIN="$WORK/$1-$2" go install "$3@$2"
    mv "$WORK/$1-$2/$1" "$BIN/$1-$2"
  fi
  link "$1" "$2"
}

control_plane() {
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ] && [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ]; then
    ln -sf "$KUBEBUILDER_ASSETS/etcd" "$BIN/etcd"
    ln -sf "$KUBEBUILDER_ASSETS/kube-apiserver" "$BIN/kube-apiserver"
    return
  fi
  etcd
  kube kube-apiserver
}

case "${1:-control-plane}" in
  control-plane) control_plane ;;
  controllers) control_plane; kube kube-controller-manager kube-scheduler; kwok ;;
  e2e) control_plane; kube kube-controller-manager kube-scheduler; kwok; helm; helmfile ;;
  helm) helm ;;
  lint) golangci_lint; gotool actionlint "$ACTIONLINT_VERSION" github.com/rhysd/actionlint/cmd/actionlint ;;
  sbom) gotool syft "$SYFT_VERSION" github.com/anchore/syft/cmd/syft ;;
  *) echo "usage: $0 [control-plane|controllers|e2e|helm|lint|sbom]" >&2; exit 2 ;;
esac
echo "$BIN"

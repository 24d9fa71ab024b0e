#!/usr/bin/env bash
# Build the test-bed control plane (kube-apiserver, kube-controller-manager, kube-scheduler, etcd,
# kwok) through the Go module proxy with the local Go toolchain, once per version, into a cache
# folder OUTSIDE the repository:
#   ${GPU_PORTAL_TESTBED_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal-testbed}/<k8s version>/bin
# Prints the bin directory on its last line. Nothing is rebuilt when all five binaries exist.
#
# Environment: K8S_VERSION (default v1.36.3; fallback v1.37.2), ETCD_VERSION (v3.6.16),
# KWOK_VERSION (v0.8.0), TESTBED_BUILD_JOBS (go build -p, default 1: be polite on shared machines).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
JOBS="${TESTBED_BUILD_JOBS:-1}"
ROOT="${GPU_PORTAL_TESTBED_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal-testbed}"
BASE="$ROOT/$K8S_VERSION"
BIN="$BASE/bin"
SRC="$BASE/src"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)

have_all() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
}

if have_all; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "testbed: the Go toolchain is needed (go not on PATH)" >&2; exit 2; }
mkdir -p "$BIN" "$SRC"
export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
start=$(date +%s)
log() { echo "testbed: [$(( $(date +%s) - start ))s] $*" >&2; }

# --- Kubernetes: a throwaway wrapper module that pins every staging module to its published tag --
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
patch="${K8S_VERSION##*.}"
staging="v0.${minor}.${patch}"
if [[ ! -x "$BIN/kube-apiserver" || ! -x "$BIN/kube-controller-manager" || ! -x "$BIN/kube-scheduler" ]]; then
  W="$SRC/k8s"
  mkdir -p "$W"
  # The staging list is read from k8s.io/kubernetes' own go.mod at the tag (its replace block).
  modfile="$W/kubernetes.go.mod"
  if [[ ! -s "$modfile" ]]; then
    log "fetching k8s.io/kubernetes@$K8S_VERSION go.mod"
    (cd "$W" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null 2>&1 || true)
    GOMODCACHE="$(go env GOMODCACHE)"
    cp "$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod" "$modfile"
  fi
  mapfile -t mods < <(grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$modfile" \
                      | awk '{print $1}' | sort -u)
  [[ ${#mods[@]} -gt 20 ]] || { echo "testbed: could not read the staging list from $modfile" >&2; exit 1; }
  godebug="$(grep -E '^godebug' "$modfile" || true)"
  {
    echo "module testbed.local/k8sbins"
    echo
    echo "go 1.26"
    [[ -n "$godebug" ]] && echo "$godebug"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in "${mods[@]}"; do echo "	$m => $m $staging"; done
    echo ")"
  } > "$W/go.mod"
  log "k8s wrapper module: ${#mods[@]} staging modules pinned to $staging"
  (
    cd "$W"
    log "resolving kube-apiserver, kube-controller-manager, kube-scheduler (module download)"
    go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
                 "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
                 "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION"
    LDF="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
      [[ -x "$BIN/$cmd" ]] && continue
      log "building $cmd"
      go build -trimpath -p "$JOBS" -ldflags "$LDF" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
      mv "$BIN/$cmd.tmp" "$BIN/$cmd"
    done
  )
fi

# --- etcd: its own wrapper module (server/v3 has a main package at the module root) --------------
if [[ ! -x "$BIN/etcd" ]]; then
  W="$SRC/etcd"
  mkdir -p "$W"
  printf 'module testbed.local/etcdbin\n\ngo 1.26\n' > "$W/go.mod"
  (
    cd "$W"
    log "resolving etcd $ETCD_VERSION"
    go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    log "building etcd"
    go build -trimpath -p "$JOBS" -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$BIN/etcd.tmp" "$BIN/etcd"
  )
fi

# --- kwok: no replace directives, so `go install` works ---------------------------------------
if [[ ! -x "$BIN/kwok" ]]; then
  log "building kwok $KWOK_VERSION"
  GOBIN="$BIN" go install -trimpath -p "$JOBS" \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
fi

have_all || { echo "testbed: build finished but binaries are missing in $BIN" >&2; exit 1; }
elapsed=$(( $(date +%s) - start ))
echo "k8s=$K8S_VERSION staging=$staging etcd=$ETCD_VERSION kwok=$KWOK_VERSION go=$(go env GOVERSION) build_seconds=$elapsed jobs=$JOBS" > "$BASE/BUILD-INFO"
log "done in ${elapsed}s"
echo "$BIN"

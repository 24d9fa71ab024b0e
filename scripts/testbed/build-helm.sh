#!/usr/bin/env bash
# Build the Helm CLI through the Go module proxy, once per version, into
# ${GPU_PORTAL_TESTBED_DIR:-~/.cache/gpu-portal-testbed}/helm-<version>/bin/helm, beside the test
# bed's binaries. The chart test (tests/k8s/test_helm_chart.py) renders deploy/helm/gpu-portal
# with it. Prints the binary's path on its last line; nothing is rebuilt when it exists.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.21.4}"
JOBS="${TESTBED_BUILD_JOBS:-1}"
ROOT="${GPU_PORTAL_TESTBED_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal-testbed}"
BIN="$ROOT/helm-$HELM_VERSION/bin"

if [[ ! -x "$BIN/helm" ]]; then
  command -v go >/dev/null || { echo "testbed: the Go toolchain is needed (go not on PATH)" >&2; exit 2; }
  mkdir -p "$BIN"
  export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
  start=$(date +%s)
  echo "testbed: building helm $HELM_VERSION (go install, -p $JOBS)" >&2
  # helm.sh/helm/v3 has no replace directives, so `go install module@version` works. The version
  # and the Kubernetes version `helm template` and `helm lint` assume (that of its client-go,
  # e.g. v0.36.2 -> 1.36) are stamped as Helm's own Makefile does; unstamped it assumes 1.20.
  modfile="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  k8s_minor="$(sed -n 's/^\s*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$modfile")"
  [[ -n "$k8s_minor" ]] || { echo "testbed: no k8s.io/client-go in $modfile" >&2; exit 1; }
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
  done
  GOBIN="$BIN" nice -n 10 go install -trimpath -p "$JOBS" -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  echo "helm=$HELM_VERSION go=$(go env GOVERSION) build_seconds=$(( $(date +%s) - start )) jobs=$JOBS" \
    > "$BIN/../BUILD-INFO"
fi
echo "$BIN/helm"

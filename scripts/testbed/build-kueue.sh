#!/usr/bin/env bash
# Build the Kueue controller manager for the test bed through the Go module proxy, once per
# version, into ${GPU_PORTAL_TESTBED_DIR:-~/.cache/gpu-portal-testbed}/kueue-<version>/bin/kueue.
# Its CRDs are read from the same module (config/components/crd/bases) at test time.
# Prints the binary's path on its last line; nothing is rebuilt when it exists.
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
JOBS="${TESTBED_BUILD_JOBS:-1}"
ROOT="${GPU_PORTAL_TESTBED_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-portal-testbed}"
BIN="$ROOT/kueue-$KUEUE_VERSION/bin"

if [[ ! -x "$BIN/kueue" ]]; then
  command -v go >/dev/null || { echo "testbed: the Go toolchain is needed (go not on PATH)" >&2; exit 2; }
  mkdir -p "$BIN"
  export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
  start=$(date +%s)
  echo "testbed: building kueue $KUEUE_VERSION (go install, -p $JOBS)" >&2
  # sigs.k8s.io/kueue has no replace directives, so `go install module@version` works.
  GOBIN="$BIN" go install -trimpath -p "$JOBS" -ldflags "-s -w" \
    "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  echo "kueue=$KUEUE_VERSION go=$(go env GOVERSION) build_seconds=$(( $(date +%s) - start )) jobs=$JOBS" \
    > "$BIN/../BUILD-INFO"
fi
echo "$BIN/kueue"

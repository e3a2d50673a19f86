#!/usr/bin/env bash
# Builds helm $HELM_VERSION (default v4.3.2) from the Go module proxy,
# caches it under .cache/helm/<version>/bin, and prints its path. The
# end-to-end suite (test/e2e, the chart's checks) and `make chart-lint`
# run it; docs/adr/043 says why helm is built rather than downloaded.
#
# How: `go install helm.sh/helm/v4/cmd/helm@VERSION`, which works because
# helm's go.mod has no replace directive (a module with one needs a
# scratch module, as scripts/kubernetes.sh builds kube-apiserver). The
# binary is stamped with its version as helm's own Makefile stamps a
# release (otherwise `helm version` says v4.3). Concurrent callers wait on
# a lock instead of building the same binary twice.
#
# Environment:
#   HELM_VERSION          (default v4.3.2)
#   HELM_BUILD_LOCK_WAIT  (default 1800) seconds to wait for another build's lock
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
HELM_VERSION=${HELM_VERSION:-v4.3.2}
CACHE=$ROOT/.cache/helm/$HELM_VERSION
BIN=$CACHE/bin

log() { printf '[helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -x "$BIN/helm" ]; then
	echo "$BIN/helm"
	exit 0
fi

case "$HELM_VERSION" in
v4.[0-9]*.[0-9]*) ;;
*) echo "helm: HELM_VERSION=$HELM_VERSION: want v4.MINOR.PATCH" >&2; exit 2 ;;
esac
command -v "$GO" >/dev/null || { echo "helm: $GO is not on PATH" >&2; exit 1; }
command -v flock >/dev/null || { echo "helm: flock is not on PATH" >&2; exit 1; }
mkdir -p "$BIN"
exec 9>"$CACHE/.lock"
flock -w "${HELM_BUILD_LOCK_WAIT:-1800}" 9 || { echo "helm: could not lock $CACHE/.lock" >&2; exit 1; }
if [ -x "$BIN/helm" ]; then # another caller built it while we waited
	echo "$BIN/helm"
	exit 0
fi

log "$HELM_VERSION: compiling helm (a few minutes on 2 cores, cold)"
start=$SECONDS
# GOBIN gets the binary under its final name only once it is complete:
# install into a scratch directory, then move it.
tmp=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOFLAGS="-buildvcs=false" CGO_ENABLED=0 GOBIN=$tmp "$GO" install -trimpath \
	-ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
	"helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >&2
mv -f "$tmp/helm" "$BIN/helm"
log "$HELM_VERSION: helm built in $((SECONDS - start))s"
echo "$BIN/helm"

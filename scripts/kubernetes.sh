#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and kubectl $K8S_VERSION
# (default v1.37.2) from the Go module proxy, caches them under
# .cache/kubernetes/<version>/bin, and prints their paths, one per line, in
# that order. The end-to-end suite (test/e2e) runs it.
#
# How: a scratch module requires k8s.io/kubernetes $K8S_VERSION and replaces
# every staging module its go.mod lists (k8s.io/api => ./staging/src/...)
# with the published k8s.io/<staging> v0.X.Y. The binaries are stamped with
# the version like a release build (otherwise /version says v0.0.0-master).
# Concurrent callers wait on a lock instead of building the same tree twice.
#
# Environment:
#   K8S_VERSION          (default v1.37.2)
#   K8S_BUILD_LOCK_WAIT  (default 2700) seconds to wait for another build's lock
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
K8S_VERSION=${K8S_VERSION:-v1.37.2}
CACHE=$ROOT/.cache/kubernetes/$K8S_VERSION
BIN=$CACHE/bin
CMDS=(kube-apiserver kube-controller-manager kubectl)

log() { printf '[kubernetes %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

built() {
	local c
	for c in "${CMDS[@]}"; do [ -x "$BIN/$c" ] || return 1; done
}

print_paths() {
	local c
	for c in "${CMDS[@]}"; do echo "$BIN/$c"; done
}

if built; then
	print_paths
	exit 0
fi

case "$K8S_VERSION" in
v1.[0-9]*.[0-9]*) ;;
*) echo "kubernetes: K8S_VERSION=$K8S_VERSION: want v1.MINOR.PATCH" >&2; exit 2 ;;
esac
command -v "$GO" >/dev/null || { echo "kubernetes: $GO is not on PATH" >&2; exit 1; }
command -v flock >/dev/null || { echo "kubernetes: flock is not on PATH" >&2; exit 1; }
mkdir -p "$CACHE/module" "$BIN"
exec 9>"$CACHE/.lock"
flock -w "${K8S_BUILD_LOCK_WAIT:-2700}" 9 || { echo "kubernetes: could not lock $CACHE/.lock" >&2; exit 1; }
if built; then # another caller built them while we waited
	print_paths
	exit 0
fi

cd "$CACHE/module"
staging_ver="v0.${K8S_VERSION#v1.}"
if [ ! -f go.mod ] || ! grep -q "^require k8s.io/kubernetes $K8S_VERSION\$" go.mod; then
	# go mod download -json reports its errors in the JSON, on stdout.
	dl=$(GOFLAGS= "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION") ||
		{ echo "kubernetes: go mod download k8s.io/kubernetes@$K8S_VERSION failed: $dl" >&2; exit 1; }
	kmod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$dl")
	[ -n "$kmod" ] && [ -f "$kmod" ] || { echo "kubernetes: cannot download k8s.io/kubernetes@$K8S_VERSION's go.mod" >&2; exit 1; }
	staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$kmod")
	[ -n "$staging" ] || { echo "kubernetes: no staging replaces in $kmod" >&2; exit 1; }
	{
		echo "module quantykube.local/e2e/kubernetes"
		echo
		echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kmod")"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		echo "replace ("
		for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$staging_ver"; done
		echo ")"
	} >go.mod
	rm -f go.sum
	log "$K8S_VERSION: resolving modules ($(echo "$staging" | wc -w) staging modules -> $staging_ver)"
fi
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
pkgs=()
for c in "${CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c@$K8S_VERSION"); done
"$GO" get "${pkgs[@]}" >&2
for c in "${CMDS[@]}"; do
	[ -x "$BIN/$c" ] && continue
	log "$K8S_VERSION: compiling $c (several minutes on 2 cores)"
	start=$SECONDS
	"$GO" build -trimpath -ldflags "$ldflags" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c" >&2
	mv -f "$BIN/$c.tmp" "$BIN/$c"
	log "$K8S_VERSION: $c built in $((SECONDS - start))s"
done
print_paths

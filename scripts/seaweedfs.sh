#!/usr/bin/env bash
# Builds SeaweedFS's `weed` at $SEAWEEDFS_VERSION from the Go module proxy,
# caches it under .cache/seaweedfs/<version>/bin, and prints its path. The
# object-storage tests (pkg/replicate/objstore) run it as a real
# S3-compatible server (`weed server -s3`).
#
# How: a scratch module requires github.com/seaweedfs/seaweedfs at
# $SEAWEEDFS_VERSION and repeats the replace directives of that version's
# go.mod, since `go install ...@version` refuses a module that has any (as
# scripts/kubernetes.sh builds kube-apiserver). Concurrent callers wait on
# a lock instead of building the same tree twice.
#
# Environment:
#   SEAWEEDFS_VERSION          (default the pseudo-version below)
#   SEAWEEDFS_BUILD_LOCK_WAIT  (default 1800) seconds to wait for another build's lock
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
SEAWEEDFS_VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
CACHE=$ROOT/.cache/seaweedfs/$SEAWEEDFS_VERSION
BIN=$CACHE/bin

log() { printf '[seaweedfs %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -x "$BIN/weed" ]; then
	echo "$BIN/weed"
	exit 0
fi

case "$SEAWEEDFS_VERSION" in
v[0-9]*.[0-9]*.[0-9]*) ;;
*) echo "seaweedfs: SEAWEEDFS_VERSION=$SEAWEEDFS_VERSION: want a module version (vX.Y.Z or a pseudo-version)" >&2; exit 2 ;;
esac
command -v "$GO" >/dev/null || { echo "seaweedfs: $GO is not on PATH" >&2; exit 1; }
command -v flock >/dev/null || { echo "seaweedfs: flock is not on PATH" >&2; exit 1; }
mkdir -p "$CACHE/module" "$BIN"
exec 9>"$CACHE/.lock"
flock -w "${SEAWEEDFS_BUILD_LOCK_WAIT:-1800}" 9 || { echo "seaweedfs: could not lock $CACHE/.lock" >&2; exit 1; }
if [ -x "$BIN/weed" ]; then # another caller built it while we waited
	echo "$BIN/weed"
	exit 0
fi

cd "$CACHE/module"
if [ ! -f go.mod ] || ! grep -q "^require github.com/seaweedfs/seaweedfs $SEAWEEDFS_VERSION\$" go.mod; then
	# go mod download -json reports its errors in the JSON, on stdout.
	dl=$(GOFLAGS= "$GO" mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION") ||
		{ echo "seaweedfs: go mod download github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION failed: $dl" >&2; exit 1; }
	smod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$dl")
	[ -n "$smod" ] && [ -f "$smod" ] || { echo "seaweedfs: cannot download github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION's go.mod" >&2; exit 1; }
	# Every replace of that go.mod, one-line or in a block, whose target is
	# a module version (a local path exists only in SeaweedFS's own tree).
	replaces=$(awk '
		/^replace[[:space:]]*\($/ { block = 1; next }
		block && /^\)/ { block = 0; next }
		block { print; next }
		/^replace[[:space:]]/ { sub(/^replace[[:space:]]+/, ""); print }
	' "$smod" | sed 's#//.*##' | awk 'NF >= 4 && $(NF-1) !~ /^\.{1,2}\// && $(NF-1) !~ /^\//')
	{
		echo "module quantykube.local/test/seaweedfs"
		echo
		echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$smod")"
		echo
		echo "require github.com/seaweedfs/seaweedfs $SEAWEEDFS_VERSION"
		if [ -n "$replaces" ]; then
			echo
			echo "replace ("
			while read -r line; do printf '\t%s\n' "$line"; done <<<"$replaces"
			echo ")"
		fi
	} >go.mod
	rm -f go.sum
	log "$SEAWEEDFS_VERSION: resolving modules ($(grep -c '=>' go.mod || true) replace directives repeated)"
fi
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
"$GO" get "github.com/seaweedfs/seaweedfs/weed@$SEAWEEDFS_VERSION" >&2
log "$SEAWEEDFS_VERSION: compiling weed (about 8 minutes on 2 cores, cold)"
start=$SECONDS
"$GO" build -trimpath -ldflags "-s -w" -o "$BIN/weed.tmp" github.com/seaweedfs/seaweedfs/weed >&2
mv -f "$BIN/weed.tmp" "$BIN/weed"
log "$SEAWEEDFS_VERSION: weed built in $((SECONDS - start))s"
echo "$BIN/weed"

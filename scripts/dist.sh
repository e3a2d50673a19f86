#!/usr/bin/env bash
# make dist: kubectl-quanty and quantykube for linux, darwin and windows on
# amd64 and arm64, as release archives in dist/ (one binary each, the way
# krew unpacks them; kubectl-quanty's with kubectl_complete-quanty, its
# completion through kubectl, but on windows), and the krew manifest
# plugins/quanty.yaml filled in with the version, the archives' addresses
# and their sha256 as dist/quanty.yaml. kubectl-quanty is a module of its
# own (ADR-040), built in cmd/kubectl-quanty.
#
# VERSION names the release (default: the tag at HEAD, else
# v0.0.0-g<commit>, since krew wants a semantic version: the g keeps it one
# when the short commit is all digits with a leading zero); both binaries
# print it (version). DIST_URL is where the archives will be published
# (the manifest's uri); PLATFORMS="os/arch ..." builds fewer (then no
# manifest is written: it must name them all).
#
# Every archive carries LICENSE, which krew-index requires. The repository
# has none yet, and choosing one is not this script's business: a release
# (VERSION given, or a tag at HEAD) fails without it; a development build
# says it is missing and goes on.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
tag=$(git describe --tags --exact-match 2>/dev/null || true)
release=
if [ -n "${VERSION:-}" ] || [ -n "$tag" ]; then
	release=1
fi
VERSION=${VERSION:-${tag:-v0.0.0-g$(git rev-parse --short HEAD)}}
DIST_URL=${DIST_URL:-https://github.com/quantyroot/quantykube/releases/download/$VERSION}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64}
OUT=dist

license=
if [ -f LICENSE ]; then
	license=LICENSE
elif [ -n "$release" ]; then
	echo "dist: no LICENSE file at the repository root: a release ($VERSION) needs one in every archive (krew-index requires it); add the project's license and commit it" >&2
	exit 1
else
	echo "dist: warning: no LICENSE file at the repository root: these archives carry none, and krew-index refuses them" >&2
fi

rm -rf "$OUT"
mkdir -p "$OUT"
# archive DIR TGZ FILE...: those files of DIR alone, with nothing of this
# machine (owner, times) in them, so that the same binary gives the same
# sha256.
archive() {
	local dir=$1 tgz=$2
	shift 2
	tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$@" | gzip -n >"$tgz"
}
# build ARGS: go build for $os/$arch, as released: static, and grpc
# without golang.org/x/net/trace (grpcnotrace: the Makefile's build says
# why). -s -w make the archives smaller, not the process: the symbol table
# and DWARF are not loaded.
build() { GOOS=$os GOARCH=$arch CGO_ENABLED=0 $GO build -tags grpcnotrace -trimpath -ldflags "-s -w -X main.version=$VERSION" "$@"; }
# The template without its opening comment, which is about the template.
manifest=$(sed '1,/^apiVersion:/{/^#/d}' plugins/quanty.yaml)
for p in $PLATFORMS; do
	os=${p%/*} arch=${p#*/} ext=
	[ "$os" = windows ] && ext=.exe
	dir=$OUT/${os}_${arch}
	mkdir -p "$dir"
	echo "== $os/$arch"
	build -o "$dir/quantykube$ext" ./cmd/quantykube
	(cd cmd/kubectl-quanty && build -o "$ROOT/$dir/kubectl-quanty$ext" .)
	[ -z "$license" ] || cp "$license" "$dir/"
	# kubectl runs kubectl_complete-quanty, a shell script, to complete
	# kubectl quanty; Windows has no sh to run it.
	complete=
	if [ "$os" != windows ]; then
		cp cmd/kubectl-quanty/kubectl_complete-quanty "$dir/"
		complete=kubectl_complete-quanty
	fi
	# $license and $complete unquoted: no argument at all when empty.
	archive "$dir" "$OUT/kubectl-quanty_${VERSION}_${os}_${arch}.tar.gz" "kubectl-quanty$ext" $complete $license
	archive "$dir" "$OUT/quantykube_${VERSION}_${os}_${arch}.tar.gz" "quantykube$ext" $license
	sum=$(sha256sum "$OUT/kubectl-quanty_${VERSION}_${os}_${arch}.tar.gz" | cut -d' ' -f1)
	manifest=${manifest//@SHA256_${os}_${arch}@/$sum}
done
manifest=${manifest//@VERSION@/$VERSION}
manifest=${manifest//@URL@/$DIST_URL}
if grep -q '@SHA256_' <<<"$manifest"; then
	echo "dist: PLATFORMS left some out: no dist/quanty.yaml (the manifest names every platform)"
else
	printf '%s\n' "$manifest" >"$OUT/quanty.yaml"
	echo "dist: the krew manifest is dist/quanty.yaml"
fi
(cd "$OUT" && sha256sum -- *.tar.gz >SHA256SUMS)
ls -l "$OUT"

#!/usr/bin/env bash
# make dist: kubectl-quanty and quantykube for linux, darwin and windows on
# amd64 and arm64, as release archives in dist/ (one binary each, the way
# krew unpacks them), and the krew manifest plugins/quanty.yaml filled in
# with the version, the archives' addresses and their sha256 as
# dist/quanty.yaml.
#
# VERSION names the release (default: the tag at HEAD, else
# v0.0.0-<commit>, since krew wants a semantic version); DIST_URL is where
# the archives will be published (the manifest's uri); PLATFORMS="os/arch
# ..." builds fewer (then no manifest is written: it must name them all).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --exact-match 2>/dev/null || echo "v0.0.0-$(git rev-parse --short HEAD)")}
DIST_URL=${DIST_URL:-https://github.com/quantyroot/quantykube/releases/download/$VERSION}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64}
OUT=dist

rm -rf "$OUT"
mkdir -p "$OUT"
# archive DIR FILE TGZ: FILE of DIR alone, with nothing of this machine
# (owner, times) in it, so that the same binary gives the same sha256.
archive() {
	tar -C "$1" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$2" | gzip -n >"$3"
}
# The template without its opening comment, which is about the template.
manifest=$(sed '1,/^apiVersion:/{/^#/d}' plugins/quanty.yaml)
for p in $PLATFORMS; do
	os=${p%/*} arch=${p#*/} ext=
	[ "$os" = windows ] && ext=.exe
	dir=$OUT/${os}_${arch}
	mkdir -p "$dir"
	echo "== $os/$arch"
	GOOS=$os GOARCH=$arch CGO_ENABLED=0 $GO build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o "$dir/kubectl-quanty$ext" ./cmd/kubectl-quanty
	GOOS=$os GOARCH=$arch CGO_ENABLED=0 $GO build -trimpath -ldflags "-s -w" -o "$dir/quantykube$ext" ./cmd/quantykube
	archive "$dir" "kubectl-quanty$ext" "$OUT/kubectl-quanty_${VERSION}_${os}_${arch}.tar.gz"
	archive "$dir" "quantykube$ext" "$OUT/quantykube_${VERSION}_${os}_${arch}.tar.gz"
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

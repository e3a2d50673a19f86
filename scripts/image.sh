#!/usr/bin/env bash
# make image: QuantyKube's OCI image, built without a container daemon
# (docs/image.md, ADR-042). For each of IMAGE_PLATFORMS (default
# linux/amd64 linux/arm64 linux/arm/v7) quantykube is built as make dist
# builds it, then deploy/image (a module of its own, on
# go-containerregistry) assembles the images from scratch with Debian's CA
# certificates and time zones (apt-get download, cached in .cache/image)
# and writes, in IMAGE_OUT (default dist):
#   quantykube-image/                  the OCI image layout of every platform
#   quantykube-image.tar               the build machine's platform, for
#                                      docker load and podman load
#   quantykube-image_OS_ARCH.spdx.json each platform's SBOM (also in the image)
#
# Reproducible: every time in the image is SOURCE_DATE_EPOCH (default: the
# commit's, git log -1 --format=%ct), so one commit, one toolchain and the
# same Debian package versions (the SBOM names them) give the same digests.
# VERSION is named as scripts/dist.sh names it. IMAGE_DEBS="a.deb b.deb"
# takes saved packages instead of downloading the current ones.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
tag=$(git describe --tags --exact-match 2>/dev/null || true)
VERSION=${VERSION:-${tag:-v0.0.0-g$(git rev-parse --short HEAD)}}
REVISION=$(git rev-parse HEAD)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
IMAGE_PLATFORMS=${IMAGE_PLATFORMS:-linux/amd64 linux/arm64 linux/arm/v7}
OUT=${IMAGE_OUT:-dist}
CACHE=$ROOT/.cache/image
mkdir -p "$OUT" "$CACHE/debs" "$ROOT/.cache/bin"
OUT=$(cd "$OUT" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fetch_debs: the candidate version of each package on this machine's apt
# lists, downloaded once into the cache and reused while its sha256 is the
# one apt names.
fetch_debs() {
	local uris
	uris=$(apt-get download --print-uris ca-certificates tzdata) || return 1
	[ -n "$uris" ] || return 1
	local apt_opts=()
	# apt drops root to its _apt user to download, who cannot write the
	# cache: as root, download as root.
	[ "$(id -u)" != 0 ] || apt_opts=(-o APT::Sandbox::User=root)
	debs=()
	local uri file size sum
	while read -r uri file size sum; do
		sum=${sum#SHA256:}
		if ! echo "$sum  $CACHE/debs/$file" | sha256sum --status -c 2>/dev/null; then
			pkg=${file%%_*}
			echo "image: downloading $file" >&2
			(cd "$CACHE/debs" && apt-get download -qq "${apt_opts[@]}" "$pkg") || return 1
			echo "$sum  $CACHE/debs/$file" | sha256sum --status -c || { echo "image: $file does not have the sha256 apt names" >&2; return 1; }
		fi
		debs+=("$CACHE/debs/$file")
	done <<<"$uris"
}

if [ -n "${IMAGE_DEBS:-}" ]; then
	read -r -a debs <<<"$IMAGE_DEBS"
else
	command -v apt-get >/dev/null || { echo "image: the image takes its CA certificates and time zones from Debian's packages, fetched with apt-get, which is not here: give IMAGE_DEBS=\"ca-certificates_*.deb tzdata_*.deb\"" >&2; exit 1; }
	if ! fetch_debs; then
		# No package lists yet, or lists older than the mirror.
		if [ "$(id -u)" = 0 ]; then
			echo "image: apt-get update" >&2
			apt-get update -qq >&2
			fetch_debs || exit 1
		else
			echo "image: apt-get download ca-certificates tzdata failed: run apt-get update (as root), or give IMAGE_DEBS" >&2
			exit 1
		fi
	fi
fi

license=()
if [ -f LICENSE ]; then
	license=(--license-file LICENSE)
else
	echo "image: no LICENSE file at the repository root: the image carries none, and no org.opencontainers.image.licenses" >&2
fi

host=linux/$($GO env GOARCH)
[ "$host" != linux/arm ] || host=linux/arm/v7
binaries=()
tar=()
for p in $IMAGE_PLATFORMS; do
	IFS=/ read -r os arch variant <<<"$p"
	[ "$os" = linux ] || { echo "image: $p: the image is for linux only" >&2; exit 1; }
	goarm=
	if [ "$arch" = arm ]; then
		[ "${variant:-v7}" = v7 ] || { echo "image: $p: of arm, only v7 is built" >&2; exit 1; }
		goarm=7 variant=v7 p=linux/arm/v7
	fi
	bin=$work/${p//\//_}/quantykube
	echo "image: building quantykube $VERSION for $p" >&2
	# As make dist builds it: static, grpc without x/net/trace, the
	# version stamped, no paths of this machine (-trimpath).
	GOOS=linux GOARCH=$arch GOARM=$goarm CGO_ENABLED=0 $GO build -tags grpcnotrace -trimpath \
		-ldflags "-s -w -X main.version=$VERSION" -o "$bin" ./cmd/quantykube
	binaries+=(--binary "$p=$bin")
	[ "$p" != "$host" ] || tar=(--tar "$OUT/quantykube-image.tar" --tar-platform "$host")
done
[ ${#tar[@]} -gt 0 ] || echo "image: $host is not in IMAGE_PLATFORMS: no docker archive" >&2

debargs=()
for d in "${debs[@]}"; do debargs+=(--deb "$d"); done

(cd deploy/image && $GO build -o "$ROOT/.cache/bin/quantykube-image" .)
rm -f "$OUT/quantykube-image.tar" "$OUT"/quantykube-image_*.spdx.json
"$ROOT/.cache/bin/quantykube-image" build "${binaries[@]}" \
	"${debargs[@]}" "${license[@]}" \
	--version "$VERSION" --revision "$REVISION" --source-date-epoch "$SOURCE_DATE_EPOCH" \
	--layout "$OUT/quantykube-image" "${tar[@]}" --sbom-dir "$OUT"
if [ ${#tar[@]} -gt 0 ]; then
	echo "load it: podman load -i $OUT/quantykube-image.tar (or docker load -i)"
fi

#!/usr/bin/env bash
# Builds the peers `make bench` measures QuantyKube against (kine v0.17.5
# and etcd v3.6, through scripts/peers.sh, cached under .cache/peers), then
# runs the harness.
# Extra arguments go to the harness (cd test/bench && go run . -help);
# --peers-only builds the peers and stops. QK_REF=<commit> benchmarks that
# commit instead of the working tree; QK_BASE=<commit> measures that commit
# too, in the same run. If scripts/kubernetes.sh has built kube-apiserver
# $K8S_VERSION (default v1.37.2), the idle workload runs it as each
# target's client (-idle-apiserver; `-idle-apiserver ""` turns it off); it
# is never built from here: a cold build takes most of an hour.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
CACHE=$ROOT/.cache/bench
# QK_BENCH_BIN: where the binaries go. Worktrees that share one .cache (a
# symlink) and benchmark at once each need their own, or each overwrites
# the binaries the other is running.
BIN=${QK_BENCH_BIN:-$CACHE/bin}
mkdir -p "$BIN"

# The peers, built once and shared with the tests (scripts/peers.sh).
peers=$(scripts/peers.sh etcd kine)
ETCD_BIN=$(sed -n 1p <<<"$peers")
KINE_BIN=$(sed -n 2p <<<"$peers")

if [ "${1:-}" = "--peers-only" ]; then
	exit 0
fi

# src REF: a folder holding commit REF alone (uncommitted work left out).
src() {
	local sha dir
	sha=$(git rev-parse --short "$1")
	dir=$CACHE/src-$sha
	if [ ! -d "$dir" ]; then
		mkdir -p "$dir.tmp"
		git archive "$sha" | tar -x -C "$dir.tmp"
		mv "$dir.tmp" "$dir"
	fi
	echo "$dir"
}

# QuantyKube and the harness: from the working tree, or with QK_REF=<commit>
# from that commit. QK_BASE=<commit> also measures that commit's QuantyKube
# in the same run, as quantykube@base: before and after, side by side.
SRC=$ROOT
if [ -n "${QK_REF:-}" ]; then
	SRC=$(src "$QK_REF")
	echo "bench: QuantyKube from commit $QK_REF" >&2
fi
# quantykube as make build and make dist build it (static, grpcnotrace:
# the Makefile's build says why); both commits alike.
qkbuild() { CGO_ENABLED=0 "$GO" build -tags grpcnotrace "$@" ./cmd/quantykube; }
(cd "$SRC" && qkbuild -o "$BIN/quantykube" && cd test/bench && "$GO" build -o "$BIN/bench" .)
base=()
if [ -n "${QK_BASE:-}" ]; then
	(cd "$(src "$QK_BASE")" && qkbuild -o "$BIN/quantykube-base")
	base=(-quantykube-base "$BIN/quantykube-base")
	echo "bench: quantykube@base from commit $QK_BASE" >&2
fi
apiserver=()
KUBE_APISERVER=$ROOT/.cache/kubernetes/${K8S_VERSION:-v1.37.2}/bin/kube-apiserver
if [ -x "$KUBE_APISERVER" ]; then
	apiserver=(-idle-apiserver "$KUBE_APISERVER")
fi
exec "$BIN/bench" \
	-quantykube "$BIN/quantykube" \
	"${base[@]}" \
	"${apiserver[@]}" \
	-kine "$KINE_BIN" \
	-etcd "$ETCD_BIN" \
	"$@"

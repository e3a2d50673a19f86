#!/usr/bin/env bash
# Builds the peers `make bench` measures QuantyKube against (kine v0.17.5
# and etcd v3.6, through scripts/peers.sh, cached under .cache/peers), then
# runs the harness.
# Extra arguments go to the harness (go run ./test/bench -help);
# --peers-only builds the peers and stops. QK_REF=<commit> benchmarks that
# commit instead of the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
CACHE=$ROOT/.cache/bench
BIN=$CACHE/bin
mkdir -p "$BIN"

# The peers, built once and shared with the tests (scripts/peers.sh).
peers=$(scripts/peers.sh etcd kine)
ETCD_BIN=$(sed -n 1p <<<"$peers")
KINE_BIN=$(sed -n 2p <<<"$peers")

if [ "${1:-}" = "--peers-only" ]; then
	exit 0
fi

# QuantyKube and the harness: from the working tree, or with QK_REF=<commit>
# from that commit alone (uncommitted work elsewhere in the tree left out).
SRC=$ROOT
if [ -n "${QK_REF:-}" ]; then
	sha=$(git rev-parse --short "$QK_REF")
	SRC=$CACHE/src-$sha
	if [ ! -d "$SRC" ]; then
		mkdir -p "$SRC.tmp"
		git archive "$sha" | tar -x -C "$SRC.tmp"
		mv "$SRC.tmp" "$SRC"
	fi
	echo "bench: QuantyKube from commit $sha" >&2
fi
(cd "$SRC" && "$GO" build -o "$BIN/quantykube" ./cmd/quantykube && "$GO" build -o "$BIN/bench" ./test/bench)
exec "$BIN/bench" \
	-quantykube "$BIN/quantykube" \
	-kine "$KINE_BIN" \
	-etcd "$ETCD_BIN" \
	"$@"

#!/usr/bin/env bash
# Builds the peers `make bench` measures QuantyKube against, caching them
# under .cache/bench/bin so reruns skip the builds, then runs the harness.
#   kine  v0.17.5  (go install github.com/k3s-io/kine@v0.17.5)
#   etcd  v3.6.x   (a scratch module whose main calls etcdmain.Main)
# Extra arguments go to the harness (go run ./test/bench -help);
# --peers-only builds the peers and stops. QK_REF=<commit> benchmarks that
# commit instead of the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
KINE_VERSION=${KINE_VERSION:-v0.17.5}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CACHE=$ROOT/.cache/bench
BIN=$CACHE/bin
mkdir -p "$BIN"

if [ ! -x "$BIN/kine-$KINE_VERSION" ]; then
	echo "bench: building kine $KINE_VERSION" >&2
	tmp=$(mktemp -d)
	GOBIN=$tmp GOFLAGS=-buildvcs=false "$GO" install "github.com/k3s-io/kine@$KINE_VERSION"
	mv "$tmp/kine" "$BIN/kine-$KINE_VERSION"
	rmdir "$tmp"
fi

if [ ! -x "$BIN/etcd-$ETCD_VERSION" ]; then
	echo "bench: building etcd $ETCD_VERSION" >&2
	mod=$CACHE/etcd-$ETCD_VERSION
	mkdir -p "$mod"
	cat >"$mod/main.go" <<'GO'
// Command etcd is etcd's own server, built from the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
	(
		cd "$mod"
		[ -f go.mod ] || "$GO" mod init quantykube.bench/etcd >/dev/null 2>&1
		"$GO" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
		"$GO" mod tidy
		GOFLAGS=-buildvcs=false "$GO" build -o "$BIN/etcd-$ETCD_VERSION.tmp" .
	)
	mv "$BIN/etcd-$ETCD_VERSION.tmp" "$BIN/etcd-$ETCD_VERSION"
fi

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
	-kine "$BIN/kine-$KINE_VERSION" \
	-etcd "$BIN/etcd-$ETCD_VERSION" \
	"$@"

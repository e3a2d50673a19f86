#!/usr/bin/env bash
# Builds the peers QuantyKube is tested and measured against from the Go
# module proxy, caches them under .cache/peers/bin, and prints the path of
# each binary asked for, one per line:
#   scripts/peers.sh etcd        etcd  $ETCD_VERSION (default v3.6.16)
#   scripts/peers.sh kine        kine  $KINE_VERSION (default v0.17.5)
#   scripts/peers.sh etcdctl     etcdctl $ETCD_VERSION
#   scripts/peers.sh etcdutl     etcdutl $ETCD_VERSION
# etcd is built through a scratch module whose main calls etcdmain.Main;
# etcdctl and etcdutl from a scratch module that requires each (their
# go.mod replaces etcd's other modules with ../, so go install refuses it); kine with go
# install. Concurrent callers (parallel test binaries) wait on
# a lock instead of building twice.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
KINE_VERSION=${KINE_VERSION:-v0.17.5}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CACHE=$ROOT/.cache/peers
BIN=$CACHE/bin
mkdir -p "$BIN"
exec 9>"$CACHE/.lock"
flock -w 900 9 || { echo "peers: could not lock $CACHE/.lock" >&2; exit 1; }

build_kine() {
	local out=$BIN/kine-$KINE_VERSION
	if [ ! -x "$out" ]; then
		echo "peers: building kine $KINE_VERSION" >&2
		local tmp
		tmp=$(mktemp -d)
		GOBIN=$tmp GOFLAGS=-buildvcs=false "$GO" install "github.com/k3s-io/kine@$KINE_VERSION" >&2
		mv "$tmp/kine" "$out"
		rmdir "$tmp"
	fi
	echo "$out"
}

build_etcd() {
	local out=$BIN/etcd-$ETCD_VERSION
	if [ ! -x "$out" ]; then
		echo "peers: building etcd $ETCD_VERSION" >&2
		local mod=$CACHE/etcd-$ETCD_VERSION
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
			[ -f go.mod ] || "$GO" mod init quantykube.peers/etcd >/dev/null 2>&1
			GOFLAGS= "$GO" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
			GOFLAGS= "$GO" mod tidy >&2
			GOFLAGS=-buildvcs=false "$GO" build -o "$out.tmp" . >&2
		)
		mv "$out.tmp" "$out"
	fi
	echo "$out"
}

# build_etcd_tool TOOL PKG builds etcd's TOOL (etcdctl, etcdutl), whose
# module's package PKG a blank import keeps required.
build_etcd_tool() {
	local tool=$1
	local out=$BIN/$tool-$ETCD_VERSION
	if [ ! -x "$out" ]; then
		echo "peers: building $tool $ETCD_VERSION" >&2
		local mod=$CACHE/$tool-$ETCD_VERSION
		mkdir -p "$mod"
		(
			cd "$mod"
			[ -f go.mod ] || "$GO" mod init quantykube.peers/$tool >/dev/null 2>&1
			# A blank import keeps the requirement through go mod tidy.
			printf '%s\n' '//go:build tools' '' 'package tools' '' "import _ \"go.etcd.io/etcd/$tool/v3/$2\"" >tools.go
			GOFLAGS= "$GO" get "go.etcd.io/etcd/$tool/v3@$ETCD_VERSION" >&2
			GOFLAGS= "$GO" mod tidy >&2
			GOFLAGS=-buildvcs=false "$GO" build -o "$out.tmp" go.etcd.io/etcd/$tool/v3 >&2
		)
		mv "$out.tmp" "$out"
	fi
	echo "$out"
}

[ $# -gt 0 ] || { echo "usage: scripts/peers.sh etcd|etcdctl|etcdutl|kine ..." >&2; exit 2; }
for p in "$@"; do
	case "$p" in
	etcd) build_etcd ;;
	etcdctl) build_etcd_tool etcdctl ctlv3 ;;
	etcdutl) build_etcd_tool etcdutl etcdutl ;;
	kine) build_kine ;;
	*) echo "peers: unknown peer $p (want etcd, etcdctl, etcdutl or kine)" >&2; exit 2 ;;
	esac
done

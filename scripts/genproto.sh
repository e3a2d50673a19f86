#!/usr/bin/env bash
# Regenerates proto/historypb from proto/history.proto with pinned
# generators. `make proto` runs it; CI runs it and fails on a diff.
set -euo pipefail
cd "$(dirname "$0")/.."
PROTOC_GEN_GO=v1.36.12      # google.golang.org/protobuf, as in go.mod
PROTOC_GEN_GO_GRPC=v1.5.1   # google.golang.org/grpc/cmd/protoc-gen-go-grpc
PROTOC_WANT="libprotoc 3.21.12"  # Debian bookworm's protobuf-compiler
command -v protoc >/dev/null || { echo "FATAL: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
have=$(protoc --version)
[ "$have" = "$PROTOC_WANT" ] || { echo "FATAL: protoc is '$have', want '$PROTOC_WANT'" >&2; exit 1; }
bin=$PWD/.cache/protoc-gen
mkdir -p "$bin"
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC
# kv.proto comes from etcd's module, which a cold module cache lacks
# (go list -m names no directory for a module it has not downloaded).
go mod download go.etcd.io/etcd/api/v3
mvcc=$(go list -m -f '{{.Dir}}' go.etcd.io/etcd/api/v3)/mvccpb
[ -f "$mvcc/kv.proto" ] || { echo "FATAL: etcd's kv.proto is not at '$mvcc'" >&2; exit 1; }
PATH=$bin:$PATH protoc -I proto -I "$mvcc" \
  --go_out=. --go_opt=module=github.com/quantyroot/quantykube \
  --go-grpc_out=. --go-grpc_opt=module=github.com/quantyroot/quantykube \
  proto/history.proto

#!/usr/bin/env bash
# etcdctl's check perf as an operator runs it (docs/OPERATIONS.md): the
# given quantykube binary serves a fresh SQLite store in a temporary
# directory on loopback, and `quantykube check perf --load s` runs against
# it for etcd's full minute, printing its table. Exits 1 when the command
# fails, when a put failed (etcd's "FAIL: ERROR(...)" lines), or when a key
# is left in the store afterwards. A FAIL on time alone (throughput,
# slowest, stddev) is printed as a warning: it judges this shared 2-core
# machine at that minute, and timing targets live in benchmarks, not in
# what fails CI (make bench).
#
#   bash scripts/check-perf.sh bin/quantykube
set -euo pipefail
bin=${1:?usage: scripts/check-perf.sh QUANTYKUBE_BINARY}
[ -x "$bin" ] || { echo "FATAL: $bin is not an executable quantykube" >&2; exit 1; }
dir=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
"$bin" serve --listen-address 127.0.0.1:0 --endpoint "sqlite://$dir/state.db" --log-format json 2>"$dir/serve.log" &
pid=$!
url=
for _ in $(seq 100); do
  url=$(sed -n 's/.*"msg":"serving etcd v3 API","listen":"\(http:\/\/127\.0\.0\.1:[0-9]*\)".*/\1/p' "$dir/serve.log")
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$url" ] || { cat "$dir/serve.log" >&2; echo "FATAL: quantykube serve did not start" >&2; exit 1; }
echo "quantykube serve on sqlite://$dir/state.db at $url"
status=0
"$bin" check perf --endpoints "$url" --load s | tee "$dir/perf.out" || status=$?
if [ "$status" != 0 ] && [ "$(tail -n 1 "$dir/perf.out")" = FAIL ] && ! grep -q '^FAIL: \(ERROR\|too many errors\)' "$dir/perf.out"; then
  echo "WARNING: check perf says FAIL on time alone on this machine (above); not a CI failure" >&2
  status=0
fi
kill "$pid" && wait "$pid" || true
pid=
# The store is left as it was found: no key, whatever the verdict.
keys=$("$bin" check hash --endpoint "sqlite://$dir/state.db" -o json | sed -n 's/.*"keys":\([0-9]*\).*/\1/p')
[ "$keys" = 0 ] || { echo "FATAL: check perf left ${keys:-?} keys in the store" >&2; exit 1; }
exit "$status"

#!/usr/bin/env bash
# Runs Kubernetes' own storage test suite (k8s.io/apiserver, ./pkg/storage/etcd3/...)
# against QuantyKube, with no test patched, skipped or loosened.
#
# How: copy k8s.io/apiserver@$APISERVER_VERSION from the Go module cache into
# .cache/conformance/apiserver (git-ignored), rewrite only its import of
# k8s.io/apiserver/pkg/storage/etcd3/testserver to our drop-in
# test/conformance/testserver (which starts QuantyKube in-process on a fresh
# SQLite file per test), point the copy's go.mod at this checkout with replace
# directives, and `go test` the suite.
#
# Environment:
#   QUANTYKUBE_CONFORMANCE_BACKEND  quantykube (default, SQLite) | postgres (QuantyKube
#                                   on PostgreSQL, a fresh database per test) | pgbouncer
#                                   (the same through PgBouncer in transaction mode) | mysql
#                                   (QuantyKube on MariaDB, a fresh database per test) | etcd
#                                   (reference run against a real embedded etcd,
#                                   proves the harness)
#   QUANTY_TEST_POSTGRES_DSN        postgres backend: the server to make test databases
#                                   on; unset: a throwaway cluster is started from
#                                   /usr/lib/postgresql/15/bin (as the postgres user
#                                   when root) and removed at exit
#   QUANTY_TEST_MYSQL_DSN           mysql backend: the server (mysql://user@host:port/) to
#                                   make test databases on; unset: a throwaway MariaDB is
#                                   started (Debian's mariadb-server, as the mysql user
#                                   when root) and removed at exit
#   CONFORMANCE_PKGS                packages to test (default ./pkg/storage/etcd3/...)
#   CONFORMANCE_RUN                 optional -run regexp (for local debugging only)
#   CONFORMANCE_TIMEOUT             go test -timeout (default 20m)
#   CONFORMANCE_DIR                 scratch folder (default <repo>/.cache/conformance)
#
# Exit status: 0 only if every test passed; non-zero on any failure, build
# error or missing prerequisite.
set -euo pipefail

APISERVER_VERSION=v0.37.2
MIN_GO_MINOR=26
ORIG_IMPORT='k8s.io/apiserver/pkg/storage/etcd3/testserver'
OUR_MODULE='github.com/quantyroot/quantykube'
OUR_CONF_MODULE="$OUR_MODULE/test/conformance"
OUR_IMPORT="$OUR_CONF_MODULE/testserver"

die() {
	echo >&2
	echo "##################################################################" >&2
	echo "## conformance: FATAL: $*" >&2
	echo "##################################################################" >&2
	exit 2
}
step() { echo "==> conformance: $*"; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="${CONFORMANCE_DIR:-$ROOT/.cache/conformance}"
COPY="$SCRATCH/apiserver"
PKGS="${CONFORMANCE_PKGS:-./pkg/storage/etcd3/...}"
TIMEOUT="${CONFORMANCE_TIMEOUT:-20m}"
BACKEND="${QUANTYKUBE_CONFORMANCE_BACKEND:-quantykube}"
export QUANTYKUBE_CONFORMANCE_BACKEND="$BACKEND"
case "$BACKEND" in quantykube | postgres | pgbouncer | mysql | etcd) ;; *) die "QUANTYKUBE_CONFORMANCE_BACKEND=$BACKEND: want quantykube, postgres, pgbouncer, mysql or etcd" ;; esac

# ---- prerequisites -----------------------------------------------------------
command -v go >/dev/null 2>&1 || die "'go' is not on PATH (Go 1.$MIN_GO_MINOR+ is required)"
for tool in sed grep cp diff mktemp; do
	command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not on PATH"
done
GOVER="$(go env GOVERSION)"
minor="$(echo "$GOVER" | sed -E -n 's/^go1\.([0-9]+).*/\1/p')"
[ -n "$minor" ] && [ "$minor" -ge "$MIN_GO_MINOR" ] ||
	die "Go 1.$MIN_GO_MINOR+ is required, found '$GOVER'"
[ -f "$ROOT/go.mod" ] && grep -q "^module $OUR_MODULE\$" "$ROOT/go.mod" ||
	die "$ROOT/go.mod is missing or is not module $OUR_MODULE"
[ -f "$ROOT/pkg/endpoint/endpoint.go" ] || die "$ROOT/pkg/endpoint/endpoint.go is missing"
[ -f "$ROOT/test/conformance/go.mod" ] || die "$ROOT/test/conformance/go.mod is missing"
[ -d "$ROOT/test/conformance/testserver" ] || die "$ROOT/test/conformance/testserver is missing"
if grep -q 'go.etcd.io/etcd/server/v3' "$ROOT/go.mod"; then
	die "go.etcd.io/etcd/server/v3 leaked into the main module's go.mod; it belongs only in test/conformance/go.mod"
fi

step "Go $GOVER, backend=$BACKEND, packages=$PKGS, timeout=$TIMEOUT"

# ---- 1. fetch and copy k8s.io/apiserver ---------------------------------------
step "fetching k8s.io/apiserver@$APISERVER_VERSION (Go module proxy / module cache)"
# run outside any module so nothing of ours (go.mod, go.sum) is touched
SRC="$(cd "$(mktemp -d)" && GOFLAGS= go mod download -json "k8s.io/apiserver@$APISERVER_VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')" ||
	die "go mod download k8s.io/apiserver@$APISERVER_VERSION failed (is the Go module proxy reachable?)"
[ -n "$SRC" ] && [ -f "$SRC/go.mod" ] || die "k8s.io/apiserver@$APISERVER_VERSION not found in the module cache (got '$SRC')"

step "copying $SRC -> $COPY"
mkdir -p "$SCRATCH"
if [ -d "$COPY" ]; then
	chmod -R u+w "$COPY"
	rm -rf "$COPY"
fi
cp -R "$SRC" "$COPY"
chmod -R u+w "$COPY" # the module cache is read-only

# ---- 2. rewrite the testserver import (and nothing else) ----------------------
step "rewriting imports of \"$ORIG_IMPORT\" -> \"$OUR_IMPORT\""
mapfile -t importers < <(grep -rlF --include='*.go' "\"$ORIG_IMPORT\"" "$COPY" || true)
[ "${#importers[@]}" -gt 0 ] || die "no file in k8s.io/apiserver@$APISERVER_VERSION imports $ORIG_IMPORT; the suite layout changed"
for f in "${importers[@]}"; do
	sed -i "s#\"$ORIG_IMPORT\"#\"$OUR_IMPORT\"#" "$f"
	echo "    rewrote ${f#"$COPY"/}"
done
if grep -rlF --include='*.go' "\"$ORIG_IMPORT\"" "$COPY" >/dev/null; then
	die "some imports of $ORIG_IMPORT survived the rewrite"
fi
for f in pkg/storage/etcd3/store_test.go pkg/storage/etcd3/watcher_test.go pkg/storage/etcd3/compact_test.go; do
	grep -qF "\"$OUR_IMPORT\"" "$COPY/$f" || die "$f does not import $OUR_IMPORT after the rewrite"
done
# Guard: apart from go.mod/go.sum, the copy differs from upstream only in that import line.
stray="$(diff -r -x go.mod -x go.sum "$SRC" "$COPY" | grep -vE '^(diff |[0-9]+(,[0-9]+)?c[0-9]+(,[0-9]+)?$|---$)' |
	grep -vxF -e "< 	\"$ORIG_IMPORT\"" -e "> 	\"$OUR_IMPORT\"" || true)"
[ -z "$stray" ] || die "the copy differs from upstream beyond the testserver import:
$stray"

# ---- 3. point the copy's go.mod at this checkout -------------------------------
step "editing the copy's go.mod (require + replace $OUR_CONF_MODULE and $OUR_MODULE)"
(
	cd "$COPY"
	go mod edit \
		-require="$OUR_CONF_MODULE@v0.0.0-00010101000000-000000000000" \
		-replace="$OUR_CONF_MODULE=$ROOT/test/conformance" \
		-replace="$OUR_MODULE=$ROOT"
	# seed go.sum with the sums we already pinned, so tidy needs no checksum-db look-ups for them
	cat "$ROOT/go.sum" "$ROOT/test/conformance/go.sum" >>go.sum
	step "go mod tidy (in the copy)"
	go mod tidy
) || die "preparing the copy's go.mod failed (see above)"

# ---- 3b. PostgreSQL for the postgres backend ----------------------------------
if [ "$BACKEND" = pgbouncer ]; then
	[ -x "${QUANTY_TEST_PGBOUNCER:-/usr/sbin/pgbouncer}" ] ||
		die "backend=pgbouncer: no pgbouncer at ${QUANTY_TEST_PGBOUNCER:-/usr/sbin/pgbouncer} (apt-get install pgbouncer)"
fi
if { [ "$BACKEND" = postgres ] || [ "$BACKEND" = pgbouncer ]; } && [ -z "${QUANTY_TEST_POSTGRES_DSN:-}" ]; then
	PGBIN="${QUANTY_TEST_POSTGRES_BIN:-/usr/lib/postgresql/15/bin}"
	[ -x "$PGBIN/initdb" ] && [ -x "$PGBIN/pg_ctl" ] ||
		die "backend=$BACKEND: QUANTY_TEST_POSTGRES_DSN is unset and there are no PostgreSQL server binaries in $PGBIN"
	step "starting a throwaway PostgreSQL cluster ($PGBIN)"
	pgout="$(cd "$ROOT" && go run ./test/pgtest/pgcluster start)" || die "could not start a PostgreSQL cluster (see above)"
	QUANTY_TEST_POSTGRES_DSN="${pgout%% *}"
	PGDIR="${pgout#* }"
	export QUANTY_TEST_POSTGRES_DSN
	trap '(cd "$ROOT" && go run ./test/pgtest/pgcluster stop "$PGDIR") || true' EXIT
	step "PostgreSQL at $QUANTY_TEST_POSTGRES_DSN"
fi

if [ "$BACKEND" = mysql ] && [ -z "${QUANTY_TEST_MYSQL_DSN:-}" ]; then
	[ -x /usr/sbin/mariadbd ] && [ -x /usr/bin/mariadb-install-db ] ||
		die "backend=mysql: QUANTY_TEST_MYSQL_DSN is unset and there is no MariaDB (apt-get install mariadb-server)"
	step "starting a throwaway MariaDB"
	myout="$(cd "$ROOT" && go run ./test/mytest/mycluster start)" || die "could not start MariaDB (see above)"
	QUANTY_TEST_MYSQL_DSN="${myout%% *}"
	MYDIR="${myout#* }"
	export QUANTY_TEST_MYSQL_DSN
	trap '(cd "$ROOT" && go run ./test/mytest/mycluster stop "$MYDIR") || true' EXIT
	step "MariaDB at $QUANTY_TEST_MYSQL_DSN"
fi

# ---- 4. run the suite --------------------------------------------------------
LOG="$SCRATCH/conformance-$BACKEND.log"
runargs=()
[ -n "${CONFORMANCE_RUN:-}" ] && runargs=(-run "$CONFORMANCE_RUN")
step "go test -count=1 -timeout $TIMEOUT -v ${runargs[*]} $PKGS   (full log: $LOG)"
start=$(date +%s)
set +e
(cd "$COPY" && go test -count=1 -timeout "$TIMEOUT" -v "${runargs[@]}" $PKGS) >"$LOG" 2>&1
rc=$?
set -e
elapsed=$(($(date +%s) - start))

# ---- 5. summary --------------------------------------------------------------
echo
echo "==================== conformance summary ($BACKEND) ===================="
# package lines: ok / FAIL / no test files / build failures
grep -aE '^(ok|FAIL|---|\?)[[:space:]]|^FAIL$|\[build failed\]|\[setup failed\]' "$LOG" | grep -vE '^---' || true
echo
failed_tests="$(grep -aE '^[[:space:]]*--- FAIL: ' "$LOG" | sed -E 's/^[[:space:]]*--- FAIL: ([^ ]+).*/\1/' || true)"
if [ -n "$failed_tests" ]; then
	echo "failed tests (with subtests):"
	echo "$failed_tests" | sed 's/^/    /'
	echo
fi
skipped_tests="$(grep -aE '^[[:space:]]*--- SKIP: ' "$LOG" | sed -E 's/^[[:space:]]*--- SKIP: ([^ ]+).*/\1/' || true)"
if [ -n "$skipped_tests" ]; then
	echo "tests that skipped themselves (upstream t.Skip; nothing is skipped by us):"
	echo "$skipped_tests" | sed 's/^/    /'
	echo
fi
# counts of top-level tests (subtests are in the log)
passed=$(grep -acE '^--- PASS: ' "$LOG" || true)
failed=$(grep -acE '^--- FAIL: ' "$LOG" || true)
skipped=$(grep -acE '^--- SKIP: ' "$LOG" || true)
sub_passed=$(grep -acE '^[[:space:]]+--- PASS: ' "$LOG" || true)
sub_failed=$(grep -acE '^[[:space:]]+--- FAIL: ' "$LOG" || true)
echo "top-level tests: $passed passed, $failed failed, $skipped skipped; subtests: $sub_passed passed, $sub_failed failed"
echo "go test exit code $rc after ${elapsed}s; full log: $LOG"
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
	# a build error, panic or timeout fails the run without a '--- FAIL' line
	echo
	echo "go test failed without a failing test; last lines of the log:"
	tail -n 40 "$LOG"
	failed=1
fi
status=0
if [ "$rc" -ne 0 ]; then
	echo "##### conformance FAILED (backend=$BACKEND) #####"
	status=1
elif [ "$passed" -eq 0 ]; then
	echo "##### conformance ran no test (backend=$BACKEND) #####"
	status=1
else
	echo "conformance PASSED (backend=$BACKEND)"
fi
echo "conformance: $passed passed, $failed failed, $skipped skipped"
exit "$status"

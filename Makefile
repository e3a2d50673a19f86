# QuantyKube. `make run` serves on 127.0.0.1:2379 from ./db/state.db;
# `make test` runs the default test suite. Heavy suites have their own targets.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The test tools with dependencies of their own are nested modules, so that
# a program embedding pkg/endpoint inherits none of them (ADR-012); they
# replace this module with ../.. (and chaos its two neighbours);
# test/robustness (etcd's robustness suite, which builds only against
# etcd's API v3.6) imports nothing of it.
# deploy/image (make image) is one too: go-containerregistry stays out of
# the quantykube binary's graph (ADR-042).
TOOL_MODULES = test/linearizability test/lazyfs test/chaos test/bench test/robustness test/ci/testcheck deploy/image
# The kubectl plugin is a module of its own for the same reason: cli-runtime,
# cobra and kustomize stay out of this module's graph (ADR-040).
PLUGIN       = cmd/kubectl-quanty
# testcheck runs go test in each of them: built once, as go run cannot
# reach across modules.
TESTCHECK    = $(CURDIR)/.cache/bin/testcheck
LISTEN      ?= 127.0.0.1:2379
ENDPOINT    ?= sqlite://./db/state.db

.PHONY: build kubectl-quanty run test testcheck lint replicate-s3 image image-push conformance conformance-sqlite conformance-postgres conformance-pgbouncer conformance-mysql conformance-embed e2e chart-lint proto proto-check ci bench bench-memory bench-changes dist dist-check chaos robustness fuzz

# quantykube as it is released (scripts/dist.sh, and in make image's
# image; scripts/bench.sh measures it so too): static, without cgo, which
# nothing in it needs (the image is scratch, with no libc; none is mapped,
# 1.5-2 MB less resident), and with grpc's grpcnotrace tag: grpc then leaves out
# golang.org/x/net/trace, whose html/template keeps every exported method
# of every type in the binary (7 MB of 48, 2.5 MB resident at start:
# docs/adr/041). go build without them builds a
# binary that works the same, only larger.
BUILD_ENV   = CGO_ENABLED=0
BUILD_FLAGS = -tags grpcnotrace

build:
	$(BUILD_ENV) $(GO) build $(BUILD_FLAGS) -o bin/quantykube ./cmd/quantykube

# The kubectl plugin (docs/KUBECTL-QUANTY.md), and kubectl_complete-quanty,
# its shell completion through kubectl: put bin/ on PATH, then kubectl
# quanty --help. Without cgo, as make dist builds it: with cgo, the plugin
# package kustomize imports (through cli-runtime) makes the linker keep
# every method, and the binary grows by half (ADR-024).
kubectl-quanty:
	cd $(PLUGIN) && CGO_ENABLED=0 $(GO) build -o $(CURDIR)/bin/kubectl-quanty .
	cp $(PLUGIN)/kubectl_complete-quanty bin/

run: build
	./bin/quantykube serve --listen-address $(LISTEN) --endpoint $(ENDPOINT)

# Unit tests and the end-to-end suites (test/framework): integration through
# the real etcd client on SQLite, PostgreSQL, MariaDB and a real etcd v3.6
# (built by scripts/peers.sh), History on SQLite, PostgreSQL and MariaDB,
# the replica and database-restart tests on PostgreSQL and MariaDB, the
# kill -9 crash test on the three databases, and
# the operators' commands: import from a real kine v0.17.5 and etcd, backup
# under write load, pg_dump, the health endpoints, deploy/'s command lines.
# PostgreSQL is QUANTY_TEST_POSTGRES_DSN, else a throwaway cluster from
# /usr/lib/postgresql/15/bin, else a loud skip; MariaDB likewise
# QUANTY_TEST_MYSQL_DSN, else a throwaway Debian mariadb-server. test/ci/testcheck runs
# go test -json and fails on any failure, build failure or, under CI=true,
# any skipped test. This module's include test/modgraph: what a program
# embedding pkg/endpoint inherits. The nested modules' own tests (the
# kubectl plugin's, with the kubectl in $$KUBECTL or on PATH; the recorder
# and checks, lazyfs, the harness, testcheck itself, and make image built
# twice to the same digests) run after this module's.
test: lint testcheck
	$(TESTCHECK) -go $(GO) -- -count=1 -timeout 20m ./...
	@for m in $(PLUGIN) test/linearizability test/lazyfs test/bench test/robustness test/ci/testcheck deploy/image; do (cd $$m && $(TESTCHECK) -go $(GO) -- -count=1 -timeout 10m ./...) || exit 1; done

testcheck:
	@mkdir -p $(dir $(TESTCHECK)) && cd test/ci/testcheck && $(GO) build -o $(TESTCHECK) .

# The nested modules (the plugin, test/conformance, test/e2e and the tool
# modules) replace this module with ../..: their go.mod must follow ours,
# or they stop building.
lint:
	@test -z "$$(gofmt -l cmd pkg test deploy)" || { echo "gofmt needed:"; gofmt -l cmd pkg test deploy; exit 1; }
	@for m in . $(PLUGIN) test/conformance test/e2e $(TOOL_MODULES); do (cd $$m && GOFLAGS= $(GO) mod tidy -diff >/dev/null) || { echo "go.mod of $$m is not tidy: cd $$m && go mod tidy"; exit 1; }; done
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) vet -tags seaweedfs ./pkg/replicate/... && $(GO) run $(STATICCHECK) -tags seaweedfs ./pkg/replicate/...
	cd $(PLUGIN) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	@for m in $(TOOL_MODULES); do (cd $$m && $(GO) vet -tags chaos ./... && $(GO) run $(STATICCHECK) -tags chaos ./...) || exit 1; done

# Replication's object stores on a real S3 server: the tests built with the
# seaweedfs tag (pkg/replicate/...) against SeaweedFS's `weed server -s3`
# on loopback, built once from the Go module proxy by scripts/seaweedfs.sh
# into .cache/seaweedfs (minutes, cold) unless QUANTY_WEED names a weed
# binary. make test runs the same packages' other tests (file://, the
# encrypted format, URLs) without it. A missing weed fails under CI=true.
replicate-s3: testcheck
	QUANTY_WEED=$${QUANTY_WEED:-$$(bash scripts/seaweedfs.sh)} && export QUANTY_WEED && \
	  $(TESTCHECK) -go $(GO) -- -tags seaweedfs -count=1 -timeout 20m ./pkg/replicate/...

# QuantyKube's OCI image (docs/image.md), built without a container
# daemon: quantykube for each of IMAGE_PLATFORMS, built as make dist builds
# it, from scratch with Debian's CA certificates and time zones (apt-get
# download, cached in .cache/image), run as uid 65532, with an SPDX SBOM;
# assembled by deploy/image on go-containerregistry (a module of its own,
# ADR-042). Reproducible: every time in it is the commit's
# (SOURCE_DATE_EPOCH), so a commit builds one digest. Writes
# dist/quantykube-image/ (the OCI image layout of every platform),
# dist/quantykube-image.tar (this machine's platform, for podman load or
# docker load) and each platform's SBOM, and prints the digests to pin.
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64 linux/arm/v7
image:
	GO=$(GO) IMAGE_PLATFORMS='$(IMAGE_PLATFORMS)' bash scripts/image.sh

# Publishes make image's layout, every platform, to IMAGE_REF (e.g.
# IMAGE_REF=registry.example.com/quantykube:v1.0.0) with the credentials of
# docker login or podman login, and prints the reference by digest. Never
# run by CI.
image-push:
	@test -n "$(IMAGE_REF)" || { echo "make image-push IMAGE_REF=REGISTRY/REPOSITORY:TAG"; exit 1; }
	cd deploy/image && $(GO) run . push --layout $(CURDIR)/dist/quantykube-image '$(IMAGE_REF)'

# Kubernetes' own storage test suite (k8s.io/apiserver pkg/storage/etcd3)
# against QuantyKube, unpatched: on SQLite, then on PostgreSQL (a throwaway
# cluster unless QUANTY_TEST_POSTGRES_DSN names a server), directly and
# through PgBouncer in transaction mode; on MariaDB (a throwaway server
# unless QUANTY_TEST_MYSQL_DSN names one); and QuantyKube
# embedded through pkg/endpoint as k3s embeds kine, serving kube-apiserver's
# storage layer (test/conformance/k3sembed).
conformance: conformance-sqlite conformance-postgres conformance-pgbouncer conformance-mysql conformance-embed

conformance-sqlite:
	QUANTYKUBE_CONFORMANCE_BACKEND=quantykube bash scripts/conformance.sh

conformance-postgres:
	QUANTYKUBE_CONFORMANCE_BACKEND=postgres bash scripts/conformance.sh

# The same suite through PgBouncer in transaction mode (docs/adr/026).
conformance-pgbouncer:
	QUANTYKUBE_CONFORMANCE_BACKEND=pgbouncer bash scripts/conformance.sh

conformance-mysql:
	QUANTYKUBE_CONFORMANCE_BACKEND=mysql bash scripts/conformance.sh

conformance-embed:
	cd test/conformance && $(GO) test -count=1 -timeout 10m ./k3sembed/

# kube-apiserver and kube-controller-manager v1.37.2 (built once, with
# kubectl, into .cache/kubernetes by scripts/kubernetes.sh) on QuantyKube,
# checked through client-go and kubectl (test/e2e, a nested module): on
# SQLite serving the aggregated API from a network namespace (root and
# iproute2), with kubectl quanty run as docs/KUBECTL-QUANTY.md shows it,
# then on two replicas sharing one PostgreSQL; the Helm chart (helm v4,
# built once by scripts/helm.sh) registers the aggregated API, is linted,
# dry-run on kube-apiserver and installed as docs/helm.md shows; and make
# image's image under Debian's podman and runc, kube-apiserver on the host
# serving from the container (TestImage). A missing part fails it.
# One check: make e2e E2E_RUN=TestKubernetes/sqlite/history
E2E_RUN ?= .
e2e:
	cd test/e2e && $(GO) vet ./... && $(GO) test -count=1 -v -timeout 60m -run '$(E2E_RUN)' .

# The Helm chart (deploy/chart/quantykube, docs/helm.md) as helm v4 renders
# it, without a cluster: helm lint --strict of each ci/*-values.yaml
# profile, bad values refused with a message, and its aggregated-API
# objects held against deploy/aggregated-api (ADR-043). helm is built once
# into .cache/helm by scripts/helm.sh. make e2e runs these and the
# chart's checks against kube-apiserver (chart-profiles, chart-docs).
chart-lint:
	cd test/e2e && $(GO) vet ./... && $(GO) test -count=1 -v -run '^TestChart' .

# proto/historypb from proto/history.proto, with pinned generators.
proto:
	bash scripts/genproto.sh

# Fails when the committed generated code is not what proto/ generates.
proto-check: proto
	@git diff --exit-code -- proto/ || { echo "proto/historypb is stale: run make proto and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- proto/)" || { echo "make proto left untracked files in proto/"; git status --porcelain -- proto/; exit 1; }

# Release archives of kubectl-quanty and quantykube for linux, darwin and
# windows on amd64 and arm64 in dist/, and the krew manifest
# plugins/quanty.yaml filled in as dist/quanty.yaml (scripts/dist.sh:
# VERSION, DIST_URL, PLATFORMS). Every archive carries LICENSE; a release
# (VERSION given, or a tag at HEAD) fails without one.
dist:
	GO=$(GO) bash scripts/dist.sh

# What CI checks of make dist, within its time: kubectl-quanty compiles for
# Windows, the platform whose paths and terminal differ most from Linux
# (both binaries on every platform would take CI too long cold; make dist
# builds them all; the krew manifest's and scripts/dist.sh's own checks are
# unit tests of cmd/kubectl-quanty).
dist-check:
	cd $(PLUGIN) && GOOS=windows GOARCH=amd64 CGO_ENABLED=0 $(GO) build -o /dev/null .

ci: proto-check dist-check test replicate-s3 conformance e2e chaos check-perf

# The fault and abuse suites (test/chaos, built with the chaos tag; root for
# FUSE and tmpfs): power cuts on lazyfs, kill -9, PostgreSQL stopped hard,
# a full disk, PostgreSQL connections reset mid-batch, each checked for
# linearizability, the watch guarantees and lost writes; replication to a
# real S3 server (SeaweedFS, as make replicate-s3 finds or builds it)
# stopped, failing and slow under write load; etcd's own
# robustness suite (test/robustness) at twice its high traffic profile on
# every database and on etcd, for ROBUSTNESS_DURATION a run; abuse figures
# side by side with etcd; then every fuzz target for a while. Prints the
# tables, also left in $(CHAOS_REPORT). See docs/RELIABILITY.md.
CHAOS_REPORT ?= $(CURDIR)/.cache/chaos/report.md
ROBUSTNESS_DURATION ?= 3s
chaos: testcheck
	@mkdir -p $(dir $(CHAOS_REPORT)) && rm -f $(CHAOS_REPORT)
	@QUANTY_WEED=$${QUANTY_WEED:-$$(bash scripts/seaweedfs.sh)} && export QUANTY_WEED && \
	  cd test/chaos && QUANTY_CHAOS_REPORT=$(CHAOS_REPORT) QUANTY_ROBUSTNESS_DURATION=$(ROBUSTNESS_DURATION) $(TESTCHECK) -go $(GO) -- -tags chaos -count=1 -timeout 45m .; \
	  status=$$?; echo; cat $(CHAOS_REPORT) 2>/dev/null; exit $$status
	$(MAKE) fuzz

# etcd's robustness suite alone (make chaos runs twelve of its fifteen
# scenarios once): ROBUSTNESS_COUNT times each run, of ROBUSTNESS_DURATION;
# ROBUSTNESS_RUN picks runs, e.g.
# make robustness ROBUSTNESS_COUNT=10 ROBUSTNESS_RUN='SQLite/EtcdPut/'
ROBUSTNESS_COUNT ?= 1
ROBUSTNESS_RUN ?= .
robustness: testcheck
	@mkdir -p $(dir $(CHAOS_REPORT)) && rm -f $(CHAOS_REPORT)
	@cd test/chaos && QUANTY_CHAOS_REPORT=$(CHAOS_REPORT) QUANTY_ROBUSTNESS_DURATION=$(ROBUSTNESS_DURATION) QUANTY_ROBUSTNESS_ALL=1 $(TESTCHECK) -go $(GO) -- -tags chaos -count=$(ROBUSTNESS_COUNT) -timeout 300m -run '^TestRobustness$$/$(ROBUSTNESS_RUN)' .; \
	  status=$$?; echo; cat $(CHAOS_REPORT) 2>/dev/null; exit $$status

# Each fuzz target for a fixed number of runs (a count, not a duration: Go
# 1.26's fuzzer can fail a run that ends on its deadline, golang/go#75804).
# New inputs it finds go to the Go cache; check the ones worth keeping into
# the package's testdata/fuzz.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKeyRange$$' -fuzztime 50000x ./pkg/mvcc
	$(GO) test -run '^$$' -fuzz '^FuzzRange$$' -fuzztime 10000x ./pkg/mvcc
	$(GO) test -run '^$$' -fuzz '^FuzzTxn$$' -fuzztime 20000x ./pkg/mvcc
	$(GO) test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime 100000x ./pkg/history
	$(GO) test -run '^$$' -fuzz '^FuzzContinue$$' -fuzztime 100000x ./pkg/history
	$(GO) test -run '^$$' -fuzz '^FuzzQuery$$' -fuzztime 20000x ./pkg/apiagg
	$(GO) test -run '^$$' -fuzz '^FuzzChangesFilter$$' -fuzztime 20000x ./pkg/apiagg
	$(GO) test -run '^$$' -fuzz '^FuzzBody$$' -fuzztime 100000x ./pkg/apiagg

# Side-by-side benchmark: QuantyKube, kine v0.17.5 and etcd v3.6 (SQLite and
# Postgres), peers built once into .cache/peers. BENCH_FLAGS adds harness
# flags, e.g. BENCH_FLAGS="-rounds 1 -clients 64", or "-workloads fanout -quick"
# for one of the workloads beside the table. See docs/BENCHMARKS.md.
BENCH_FLAGS ?= -list100k -workloads all
bench:
	bash scripts/bench.sh $(BENCH_FLAGS)

# Issue 58's memory workloads, left out of `all` (most of an hour at full
# size): one store at 50,000 ConfigMaps under kube-apiserver (scale), and
# 30 stores on one PostgreSQL (tenants). See docs/benchmarks/harness.md.
BENCH_MEMORY_FLAGS ?=
bench-memory:
	bash scripts/bench.sh -workloads scale,tenants $(BENCH_MEMORY_FLAGS)

# Issue 37's target: the first page (500, newest first) of the last hour's
# changes over 10^6 retained revisions (filled once into .cache/bench/history,
# about 4 minutes) while 1,000 updates/s run, against the updates alone,
# and etcd's updates at that rate. See docs/BENCHMARKS.md.
bench-changes:
	bash scripts/bench.sh -changes $(BENCH_CHANGES_FLAGS)

# Issue 54's cost of serve --replicate: 500 updates/s on SQLite without
# replication, with file:// and with s3:// to SeaweedFS's `weed server -s3`
# (QUANTY_WEED, or built once by scripts/seaweedfs.sh as for make
# replicate-s3), then restore --from a file:// bucket of 10^6 revisions
# (about 1 GB, filled once into .cache/bench/replicate) beside a local
# restore FILE. Left out of `all`: about 40 minutes the first time (12 of
# them the fill), 25 after. See
# docs/BENCHMARKS.md.
.PHONY: bench-replicate
BENCH_REPLICATE_FLAGS ?= -rounds 3
bench-replicate:
	QUANTY_WEED=$${QUANTY_WEED:-$$(bash scripts/seaweedfs.sh)} && export QUANTY_WEED && \
	  bash scripts/bench.sh -replicate -replicate-restore $(BENCH_REPLICATE_FLAGS)

# etcdctl's check perf as an operator runs it: quantykube serve on SQLite in
# a temporary directory on loopback, then `quantykube check perf --load s`
# against it for etcd's full minute, its table printed; fails on FAIL and
# on a key left behind (docs/OPERATIONS.md).
.PHONY: check-perf
check-perf: build
	bash scripts/check-perf.sh bin/quantykube

#!/usr/bin/env bash
# QuantyKube end-to-end test: a real kube-apiserver (and the namespace controller of a real
# kube-controller-manager) running on QuantyKube, driven with kubectl.
#
#   scripts/e2e.sh                       build everything, run all checks
#   scripts/e2e.sh --build-apiserver-only   only build/cache the Kubernetes binaries
#
# Environment:
#   QUANTY_E2E_ETCD=http://127.0.0.1:PORT  use an already running etcd-API server instead of
#                                          building and starting bin/quantykube (to validate
#                                          this script against kine or etcd). History checks
#                                          are QuantyKube-only and are not run in that mode.
#   K8S_VERSION        (default v1.37.2)  Kubernetes release built from the Go module proxy
#   KUBECTL            (default /usr/bin/kubectl, else kubectl from PATH)
#   E2E_BUILD_TIMEOUT  (default 2700)     seconds allowed for building the Kubernetes binaries
#   E2E_KEEP_TMP=1                        keep the temp dir (certs, logs, db) even on success
#
# Output: one PASS/FAIL line per check, then exactly "N passed, M failed".
# Exit status is non-zero if any check failed or could not run.
#
# Every process started here runs in its own process group and is killed on exit; every wait
# is bounded; only 127.0.0.1 is used.

set -uo pipefail

SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
ROOT="$(cd "$(dirname "${SCRIPT}")/.." && pwd)"
MANIFESTS="${ROOT}/scripts/e2e"
K8S_VERSION="${K8S_VERSION:-v1.37.2}"
CACHE_DIR="${ROOT}/.cache/kubernetes/${K8S_VERSION}"
KUBE_APISERVER_BIN="${CACHE_DIR}/bin/kube-apiserver"
KUBE_CM_BIN="${CACHE_DIR}/bin/kube-controller-manager"
QK_BIN="${ROOT}/bin/quantykube"
E2E_BUILD_TIMEOUT="${E2E_BUILD_TIMEOUT:-2700}"
EVENT_TTL_SECONDS=20
SERVICE_CIDR="10.0.0.0/24"

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---------------------------------------------------------------------------------------------
# Building kube-apiserver and kube-controller-manager from the Go module proxy.
# A scratch module requires k8s.io/kubernetes ${K8S_VERSION} and replaces every staging module
# listed in its go.mod (k8s.io/api => ./staging/src/k8s.io/api, ...) with the published
# k8s.io/<staging> v0.X.Y. Binaries and the module are cached under .cache/kubernetes/<version>.
# ---------------------------------------------------------------------------------------------
build_kubernetes() {
  if [[ -x "${KUBE_APISERVER_BIN}" && -x "${KUBE_CM_BIN}" ]]; then
    log "kubernetes ${K8S_VERSION}: cached in ${CACHE_DIR}/bin"
    return 0
  fi
  command -v go >/dev/null || { echo "go not found in PATH" >&2; return 1; }
  mkdir -p "${CACHE_DIR}/module" "${CACHE_DIR}/bin" || return 1
  (
    # Serialise concurrent runs (two e2e runs must not build the same tree at once).
    flock -w "${E2E_BUILD_TIMEOUT}" 9 || { echo "could not lock ${CACHE_DIR}/.lock" >&2; exit 1; }
    [[ -x "${KUBE_APISERVER_BIN}" && -x "${KUBE_CM_BIN}" ]] && exit 0
    set -e
    cd "${CACHE_DIR}/module"
    staging_ver="v0.${K8S_VERSION#v1.}"
    if [[ ! -f go.mod ]] || ! grep -q "^require k8s.io/kubernetes ${K8S_VERSION}\$" go.mod; then
      kmod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
      [[ -n "${kmod}" && -f "${kmod}" ]] || { echo "cannot download k8s.io/kubernetes@${K8S_VERSION} go.mod" >&2; exit 1; }
      staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "${kmod}")"
      [[ -n "${staging}" ]] || { echo "no staging replaces found in ${kmod}" >&2; exit 1; }
      {
        echo "module quantykube.local/e2e/kubernetes"
        echo
        echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "${kmod}")"
        echo
        echo "require k8s.io/kubernetes ${K8S_VERSION}"
        echo
        echo "replace ("
        for m in ${staging}; do printf '\t%s => %s %s\n' "${m}" "${m}" "${staging_ver}"; done
        echo ")"
      } > go.mod
      rm -f go.sum
      log "kubernetes ${K8S_VERSION}: resolving modules ($(echo "${staging}" | wc -w) staging modules -> ${staging_ver})"
    fi
    export GOFLAGS="${GOFLAGS:-} -mod=mod -buildvcs=false" CGO_ENABLED=0
    # Stamp the version like a release build does (otherwise /version says v0.0.0-master).
    minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
    ldflags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
      ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
    done
    go get "k8s.io/kubernetes/cmd/kube-apiserver@${K8S_VERSION}" "k8s.io/kubernetes/cmd/kube-controller-manager@${K8S_VERSION}"
    for cmd in kube-apiserver kube-controller-manager; do
      if [[ ! -x "${CACHE_DIR}/bin/${cmd}" ]]; then
        log "kubernetes ${K8S_VERSION}: compiling ${cmd} (several minutes on 2 cores)"
        start=${SECONDS}
        go build -trimpath -ldflags "${ldflags}" -o "${CACHE_DIR}/bin/${cmd}.tmp" "k8s.io/kubernetes/cmd/${cmd}"
        mv -f "${CACHE_DIR}/bin/${cmd}.tmp" "${CACHE_DIR}/bin/${cmd}"
        log "kubernetes ${K8S_VERSION}: ${cmd} built in $((SECONDS - start))s"
      fi
    done
  ) 9>"${CACHE_DIR}/.lock"
}

if [[ "${1:-}" == "--build-apiserver-only" ]]; then
  build_kubernetes
  exit $?
fi

# ---------------------------------------------------------------------------------------------
# Results, cleanup
# ---------------------------------------------------------------------------------------------
PASSED=0
FAILED=0
SUMMARY_DONE=0
TMP=""
PGIDS=()          # process groups we started (each via setsid)

pass() { PASSED=$((PASSED + 1)); printf 'PASS: %s\n' "$1"; }
fail() { FAILED=$((FAILED + 1)); printf 'FAIL: %s\n' "$1"; }
# fatal: a prerequisite failed; record it and stop (the EXIT trap prints the summary).
fatal() { fail "$1"; log "aborting: later checks cannot run"; exit 1; }

summary() {
  [[ ${SUMMARY_DONE} == 1 ]] && return
  SUMMARY_DONE=1
  printf '%d passed, %d failed\n' "${PASSED}" "${FAILED}"
}

# start_bg LOGFILE CMD...: start CMD in a new session/process group; sets BG_PID.
start_bg() {
  local logfile=$1; shift
  setsid "$@" >"${logfile}" 2>&1 </dev/null &
  BG_PID=$!
  PGIDS+=("${BG_PID}")
}

# is_alive PID: running and not a zombie (a child that exited but was not reaped yet).
is_alive() {
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "${st}" && "${st:0:1}" != Z ]]
}

# stop_pg PID...: TERM the process groups, KILL whatever is left after 10 s.
stop_pg() {
  local p i alive
  for p in "$@"; do kill -TERM -- "-${p}" 2>/dev/null || kill -TERM "${p}" 2>/dev/null; done
  for ((i = 0; i < 100; i++)); do
    alive=0
    for p in "$@"; do is_alive "${p}" && alive=1; done
    [[ ${alive} == 0 ]] && break
    sleep 0.1
  done
  for p in "$@"; do
    kill -KILL -- "-${p}" 2>/dev/null
    wait "${p}" 2>/dev/null
    forget_pg "${p}"
  done
  return 0
}
forget_pg() {
  local p keep=()
  for p in "${PGIDS[@]}"; do [[ "${p}" == "$1" ]] || keep+=("${p}"); done
  PGIDS=("${keep[@]}")
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  ((${#PGIDS[@]})) && stop_pg "${PGIDS[@]}"
  if [[ -n "${TMP}" && -d "${TMP}" ]]; then
    if [[ ${FAILED} -gt 0 || ${rc} -ne 0 || "${E2E_KEEP_TMP:-0}" == 1 ]]; then
      log "logs, certs and data kept in ${TMP}"
    else
      rm -rf "${TMP}"
    fi
  fi
  summary
  if [[ ${FAILED} -gt 0 || ${rc} -ne 0 ]]; then exit 1; fi
  exit 0
}
trap cleanup EXIT
trap 'log "interrupted"; FAILED=$((FAILED + 1)); exit 130' INT
trap 'log "terminated"; FAILED=$((FAILED + 1)); exit 143' TERM

# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
USED_PORTS=" "
port_busy() {
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v h="${hex}" 'FNR > 1 && substr($2, length($2) - 4) == h { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
free_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 30000))
    [[ "${USED_PORTS}" == *" ${p} "* ]] && continue
    port_busy "${p}" && continue
    USED_PORTS+="${p} "
    echo "${p}"
    return 0
  done
  return 1
}

tcp_open() { timeout 2 bash -c ": </dev/tcp/$1/$2" 2>/dev/null; }

# wait_until TIMEOUT_SECONDS CMD...: poll CMD every 0.5 s until it succeeds or time runs out.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  while ((SECONDS < deadline)); do
    "$@" && return 0
    sleep 0.5
  done
  "$@"
}

# k ARGS...: kubectl against the test apiserver, always bounded.
k() { timeout 60 "${KUBECTL}" --kubeconfig "${KUBECONFIG_FILE}" --request-timeout=30s "$@"; }

# oneline TEXT: squash output into one short line for FAIL reasons.
oneline() { tr '\n' ' ' <<<"$1" | sed 's/[[:space:]]\+/ /g' | cut -c1-300; }

not_found() { # not_found KIND NAME [ARGS...]: true when kubectl get says NotFound
  local out
  out=$(k get "$@" -o name 2>&1) && return 1
  [[ "${out}" == *NotFound* || "${out}" == *"not found"* ]]
}

# ---------------------------------------------------------------------------------------------
# Preflight
# ---------------------------------------------------------------------------------------------
preflight() {
  local ok=1 t
  KUBECTL="${KUBECTL:-}"
  if [[ -z "${KUBECTL}" ]]; then
    if [[ -x /usr/bin/kubectl ]]; then KUBECTL=/usr/bin/kubectl; else KUBECTL="$(command -v kubectl || true)"; fi
  fi
  [[ -n "${KUBECTL}" && -x "${KUBECTL}" ]] || { fail "preflight: kubectl not found (set KUBECTL)"; ok=0; }
  for t in go openssl curl timeout setsid flock awk sed grep base64; do
    command -v "${t}" >/dev/null || { fail "preflight: required tool '${t}' not found"; ok=0; }
  done
  [[ -r /proc/net/tcp ]] || { fail "preflight: /proc/net/tcp not readable (needed to pick free ports)"; ok=0; }
  for t in crd-widget.yaml widget.yaml event.yaml; do
    [[ -f "${MANIFESTS}/${t}" ]] || { fail "preflight: manifest ${MANIFESTS}/${t} missing"; ok=0; }
  done
  [[ ${ok} == 1 ]] || fatal "preflight: missing prerequisites"
  pass "preflight: tools present (kubectl: $("${KUBECTL}" version --client 2>/dev/null | head -1))"
}

# ---------------------------------------------------------------------------------------------
# Certificates (throwaway, in ${TMP}/pki)
# ---------------------------------------------------------------------------------------------
gen_certs() {
  local d="${TMP}/pki"
  mkdir -p "${d}" && cd "${d}" || return 1
  local conf="${d}/openssl.cnf"
  cat >"${conf}" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = IP:127.0.0.1, IP:10.0.0.1, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local
EOF
  newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
  mkca() { # mkca NAME CN
    newkey "$1.key" &&
      openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 2 -sha256 \
        -config "${conf}" -extensions v3_ca -out "$1.crt" 2>/dev/null
  }
  mkcert() { # mkcert NAME CA SUBJECT EXT
    newkey "$1.key" &&
      openssl req -new -key "$1.key" -subj "$3" -config "${conf}" -out "$1.csr" 2>/dev/null &&
      openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial -days 2 -sha256 \
        -extfile "${conf}" -extensions "$4" -out "$1.crt" 2>/dev/null
  }
  mkca ca "quantykube-e2e-ca" &&
    mkca front-proxy-ca "quantykube-e2e-front-proxy-ca" &&
    mkcert apiserver ca "/CN=kube-apiserver" server &&
    mkcert admin ca "/O=system:masters/CN=e2e-admin" client &&
    mkcert front-proxy-client front-proxy-ca "/CN=front-proxy-client" client &&
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null &&
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null &&
    openssl verify -CAfile ca.crt apiserver.crt admin.crt >/dev/null &&
    openssl verify -CAfile front-proxy-ca.crt front-proxy-client.crt >/dev/null
  local rc=$?
  cd "${ROOT}" || return 1
  return ${rc}
}

write_kubeconfig() {
  local kc="${TMP}/kubeconfig" d="${TMP}/pki"
  rm -f "${kc}"
  "${KUBECTL}" --kubeconfig "${kc}" config set-cluster e2e --server "https://127.0.0.1:${APISERVER_PORT}" \
    --certificate-authority "${d}/ca.crt" --embed-certs >/dev/null &&
    "${KUBECTL}" --kubeconfig "${kc}" config set-credentials e2e-admin \
      --client-certificate "${d}/admin.crt" --client-key "${d}/admin.key" --embed-certs >/dev/null &&
    "${KUBECTL}" --kubeconfig "${kc}" config set-context e2e --cluster e2e --user e2e-admin >/dev/null &&
    "${KUBECTL}" --kubeconfig "${kc}" config use-context e2e >/dev/null || return 1
  chmod 600 "${kc}"
  KUBECONFIG_FILE="${kc}"
}

# ---------------------------------------------------------------------------------------------
# Datastore: bin/quantykube, or QUANTY_E2E_ETCD
# ---------------------------------------------------------------------------------------------
QK_PID=""
start_quantykube() {
  start_bg "${TMP}/quantykube.log" "${QK_BIN}" serve \
    --listen-address "127.0.0.1:${ETCD_PORT}" --endpoint "sqlite://${TMP}/quantykube.db"
  QK_PID=${BG_PID}
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    is_alive "${QK_PID}" || { log "quantykube exited:"; tail -20 "${TMP}/quantykube.log" >&2; return 1; }
    tcp_open 127.0.0.1 "${ETCD_PORT}" && return 0
    sleep 0.2
  done
  log "quantykube not listening on 127.0.0.1:${ETCD_PORT} after 30s:"; tail -20 "${TMP}/quantykube.log" >&2
  return 1
}

setup_datastore() {
  if [[ -n "${QUANTY_E2E_ETCD:-}" ]]; then
    ETCD_ENDPOINT="${QUANTY_E2E_ETCD}"
    USING_QUANTYKUBE=0
    local hostport="${ETCD_ENDPOINT#*://}"
    hostport="${hostport%%/*}"
    hostport="${hostport%%,*}"
    local host="${hostport%:*}" port="${hostport##*:}"
    [[ "${host}" == 127.0.0.1 ]] || fatal "datastore: QUANTY_E2E_ETCD must be a 127.0.0.1 address, got ${ETCD_ENDPOINT}"
    if wait_until 10 tcp_open "${host}" "${port}"; then
      pass "datastore: external etcd endpoint ${ETCD_ENDPOINT} is reachable (QUANTY_E2E_ETCD)"
    else
      fatal "datastore: external etcd endpoint ${ETCD_ENDPOINT} not reachable"
    fi
    return
  fi
  USING_QUANTYKUBE=1
  log "building bin/quantykube"
  local out
  mkdir -p "$(dirname "${QK_BIN}")"
  if ! out=$(cd "${ROOT}" && timeout 900 go build -o "${QK_BIN}" ./cmd/quantykube 2>&1); then
    fatal "datastore: go build ./cmd/quantykube failed: $(oneline "${out}")"
  fi
  pass "datastore: built bin/quantykube"
  ETCD_PORT=$(free_port) || fatal "datastore: no free port"
  ETCD_ENDPOINT="http://127.0.0.1:${ETCD_PORT}"
  if start_quantykube; then
    pass "datastore: quantykube serving on ${ETCD_ENDPOINT} (sqlite://${TMP}/quantykube.db)"
  else
    fatal "datastore: quantykube did not start (see ${TMP}/quantykube.log)"
  fi
}

# ---------------------------------------------------------------------------------------------
# kube-apiserver and kube-controller-manager
# ---------------------------------------------------------------------------------------------
APISERVER_PID=""
APISERVER_STARTS=0
READY_ERR=""
start_apiserver() {
  local d="${TMP}/pki"
  APISERVER_STARTS=$((APISERVER_STARTS + 1))
  APISERVER_LOG="${TMP}/kube-apiserver.${APISERVER_STARTS}.log"
  start_bg "${APISERVER_LOG}" "${KUBE_APISERVER_BIN}" \
    --etcd-servers="${ETCD_ENDPOINT}" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="${APISERVER_PORT}" \
    --tls-cert-file="${d}/apiserver.crt" \
    --tls-private-key-file="${d}/apiserver.key" \
    --client-ca-file="${d}/ca.crt" \
    --requestheader-client-ca-file="${d}/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="${d}/front-proxy-client.crt" \
    --proxy-client-key-file="${d}/front-proxy-client.key" \
    --service-account-key-file="${d}/sa.pub" \
    --service-account-signing-key-file="${d}/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range="${SERVICE_CIDR}" \
    --authorization-mode=Node,RBAC \
    --event-ttl="${EVENT_TTL_SECONDS}s" \
    --endpoint-reconciler-type=none \
    --profiling=false \
    --v=1
  APISERVER_PID=${BG_PID}
}

readyz() {
  curl -fsS --max-time 5 --cacert "${TMP}/pki/ca.crt" --cert "${TMP}/pki/admin.crt" --key "${TMP}/pki/admin.key" \
    "https://127.0.0.1:${APISERVER_PORT}/readyz" >/dev/null 2>&1
}

# wait_apiserver_ready SECONDS
wait_apiserver_ready() {
  local deadline=$((SECONDS + $1)) start=${SECONDS}
  while ((SECONDS < deadline)); do
    if ! is_alive "${APISERVER_PID}"; then
      log "kube-apiserver exited; last log lines:"; tail -30 "${APISERVER_LOG}" >&2
      READY_ERR="kube-apiserver exited after $((SECONDS - start))s: $(oneline "$(grep '^[EF][0-9]' "${APISERVER_LOG}" | tail -1)")"
      return 1
    fi
    if readyz; then
      log "kube-apiserver ready after $((SECONDS - start))s"
      return 0
    fi
    sleep 0.5
  done
  READY_ERR="kube-apiserver not ready within $1s"
  log "kube-apiserver not ready after $1s; /readyz?verbose:"
  curl -sS --max-time 5 --cacert "${TMP}/pki/ca.crt" --cert "${TMP}/pki/admin.crt" --key "${TMP}/pki/admin.key" \
    "https://127.0.0.1:${APISERVER_PORT}/readyz?verbose" 2>&1 | grep -v '^\[+\]' | tail -20 >&2
  log "last kube-apiserver log lines:"; tail -30 "${APISERVER_LOG}" >&2
  return 1
}

KCM_PID=""
start_controller_manager() {
  # Only the namespace controller: it is what finishes namespace deletion (deletes the
  # namespace's content through discovery, then removes the "kubernetes" finalizer).
  start_bg "${TMP}/kube-controller-manager.log" "${KUBE_CM_BIN}" \
    --kubeconfig="${KUBECONFIG_FILE}" \
    --controllers=namespace \
    --leader-elect=false \
    --bind-address=127.0.0.1 \
    --secure-port="${KCM_PORT}" \
    --authentication-skip-lookup=true \
    --v=1
  KCM_PID=${BG_PID}
  sleep 2
  is_alive "${KCM_PID}" || { tail -20 "${TMP}/kube-controller-manager.log" >&2; return 1; }
}

# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
NS="e2e-$(date +%s)-${RANDOM}"

check_server_version() {
  local out
  out=$(k get --raw /version 2>&1)
  if grep -q "\"gitVersion\": *\"${K8S_VERSION}\"" <<<"${out}"; then
    pass "apiserver: /version reports ${K8S_VERSION}"
  else
    fail "apiserver: /version does not report ${K8S_VERSION}: $(oneline "${out}")"
  fi
}

check_namespaces() {
  local out rv1 rv2
  if out=$(k create namespace "${NS}" 2>&1); then
    pass "namespace: create ${NS}"
  else
    fatal "namespace: create ${NS} failed: $(oneline "${out}")"
  fi
  out=$(k get namespaces -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' 2>&1)
  if grep -qx "${NS}" <<<"${out}" && grep -qx default <<<"${out}" && grep -qx kube-system <<<"${out}"; then
    pass "namespace: list contains ${NS}, default and kube-system"
  else
    fail "namespace: list is missing ${NS}/default/kube-system: $(oneline "${out}")"
  fi
  rv1=$(k get namespace "${NS}" -o jsonpath='{.metadata.resourceVersion}' 2>&1)
  if out=$(k label namespace "${NS}" e2e.quantykube.io/updated=yes 2>&1) &&
    [[ "$(k get namespace "${NS}" -o jsonpath='{.metadata.labels.e2e\.quantykube\.io/updated}' 2>&1)" == yes ]]; then
    rv2=$(k get namespace "${NS}" -o jsonpath='{.metadata.resourceVersion}' 2>&1)
    if [[ "${rv1}" =~ ^[0-9]+$ && "${rv2}" =~ ^[0-9]+$ && ${rv2} -gt ${rv1} ]]; then
      pass "namespace: update (label) applied, resourceVersion ${rv1} -> ${rv2}"
    else
      fail "namespace: update applied but resourceVersion did not increase (${rv1} -> ${rv2})"
    fi
  else
    fail "namespace: update (label) failed: $(oneline "${out}")"
  fi
}

check_configmaps() {
  local out rv stale
  if out=$(k -n "${NS}" create configmap cm1 --from-literal=k=v1 --from-literal=other=x 2>&1); then
    pass "configmap: create cm1"
  else
    fail "configmap: create cm1 failed: $(oneline "${out}")"; return
  fi
  out=$(k -n "${NS}" create configmap cm1 --from-literal=k=dup 2>&1) &&
    fail "configmap: creating cm1 twice succeeded" ||
    { [[ "${out}" == *AlreadyExists* || "${out}" == *"already exists"* ]] &&
      pass "configmap: second create of cm1 is AlreadyExists" ||
      fail "configmap: second create of cm1 failed with the wrong error: $(oneline "${out}")"; }
  out=$(k -n "${NS}" get configmap cm1 -o jsonpath='{.data.k}' 2>&1)
  [[ "${out}" == v1 ]] && pass "configmap: get cm1 returns data k=v1" ||
    fail "configmap: get cm1 returned '$(oneline "${out}")', want v1"

  # update, and optimistic concurrency: a write carrying a stale resourceVersion must conflict
  stale=$(k -n "${NS}" get configmap cm1 -o json 2>/dev/null)
  if out=$(k -n "${NS}" patch configmap cm1 --type=merge -p '{"data":{"k":"v2"}}' 2>&1) &&
    [[ "$(k -n "${NS}" get configmap cm1 -o jsonpath='{.data.k}' 2>&1)" == v2 ]]; then
    pass "configmap: update (patch) cm1 k=v2 is read back"
  else
    fail "configmap: update cm1 failed: $(oneline "${out}")"
  fi
  if [[ -n "${stale}" ]]; then
    out=$(sed 's/"k": "v1"/"k": "stale"/' <<<"${stale}" | k replace -f - 2>&1) &&
      fail "configmap: replace with a stale resourceVersion succeeded (lost update)" ||
      { [[ "${out}" == *Conflict* || "${out}" == *"has been modified"* ]] &&
        pass "configmap: replace with a stale resourceVersion is rejected with Conflict" ||
        fail "configmap: stale replace failed with the wrong error: $(oneline "${out}")"; }
  else
    fail "configmap: could not read cm1 as JSON for the stale-update check"
  fi
  out=$(k -n "${NS}" get configmap cm1 -o jsonpath='{.data.k}' 2>&1)
  [[ "${out}" == v2 ]] && pass "configmap: cm1 still k=v2 after the rejected stale write" ||
    fail "configmap: cm1 is '$(oneline "${out}")' after the rejected stale write, want v2"

  # server-side apply
  out=$(printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-ssa\n  namespace: %s\ndata:\n  applied: "yes"\n' "${NS}" |
    k apply --server-side --field-manager=e2e -f - 2>&1) &&
    [[ "$(k -n "${NS}" get configmap cm-ssa -o jsonpath='{.data.applied}' 2>&1)" == yes ]] &&
    pass "configmap: server-side apply creates cm-ssa" ||
    fail "configmap: server-side apply failed: $(oneline "${out}")"

  # delete
  if out=$(k -n "${NS}" delete configmap cm-ssa --wait=true --timeout=30s 2>&1) && not_found -n "${NS}" configmap cm-ssa; then
    pass "configmap: delete cm-ssa, then get is NotFound"
  else
    fail "configmap: delete cm-ssa failed or it is still readable: $(oneline "${out}")"
  fi
}

# Paginated list: exercises Range with limit + revision pinning and the exact Count.
check_paged_list() {
  local n=23 i out total first rem cont items=0 pages=0 url
  local lns="${NS}-page"
  out=$(k create namespace "${lns}" 2>&1) || { fail "list: create namespace ${lns}: $(oneline "${out}")"; return; }
  {
    for ((i = 0; i < n; i++)); do
      printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: page-%02d\n  labels:\n    e2e: page\ndata:\n  i: "%d"\n' "${i}" "${i}"
    done
  } | k -n "${lns}" create -f - >/dev/null 2>"${TMP}/page-create.err" ||
    { fail "list: creating ${n} configmaps failed: $(oneline "$(cat "${TMP}/page-create.err")")"; return; }
  total=$(k -n "${lns}" get configmaps -o name 2>/dev/null | wc -l)
  out=$(k -n "${lns}" get configmaps -l e2e=page --chunk-size=5 -o name 2>&1)
  if [[ $(grep -c '^configmap/page-' <<<"${out}") == "${n}" ]]; then
    pass "list: kubectl --chunk-size=5 returns all ${n} labelled configmaps"
  else
    fail "list: chunked list returned $(grep -c '^configmap/page-' <<<"${out}") of ${n}: $(oneline "${out}")"
  fi
  # raw paging, checking remainingItemCount (needs an exact count from the datastore)
  url="/api/v1/namespaces/${lns}/configmaps?limit=5"
  first=$(k get --raw "${url}" 2>&1)
  rem=$(grep -o '"remainingItemCount":[0-9]*' <<<"${first}" | cut -d: -f2)
  if [[ -n "${rem}" && "${rem}" == $((total - 5)) ]]; then
    pass "list: first page of 5 reports remainingItemCount=${rem} (total ${total})"
  else
    fail "list: first page remainingItemCount='${rem}', want $((total - 5)) (total ${total})"
  fi
  # a write after the first page must not show up in later pages (pinned revision)
  k -n "${lns}" create configmap page-late --from-literal=late=1 >/dev/null 2>&1
  out="${first}"
  while :; do
    pages=$((pages + 1))
    items=$((items + $(grep -o '"name":"page-[^"]*"' <<<"${out}" | wc -l)))
    [[ "${out}" == *'"name":"page-late"'* ]] && items=-1000
    cont=$(grep -o '"continue":"[^"]*"' <<<"${out}" | head -1 | cut -d'"' -f4)
    [[ -z "${cont}" || ${pages} -gt 50 ]] && break
    out=$(k get --raw "${url}&continue=${cont}" 2>&1) || break
  done
  if [[ ${items} == "${n}" ]]; then
    pass "list: paging with continue tokens returns exactly ${n} items in ${pages} pages, snapshot excludes a later write"
  else
    fail "list: paging returned ${items} page-* items in ${pages} pages, want ${n} (negative = saw the later write)"
  fi
  k delete namespace "${lns}" --wait=false >/dev/null 2>&1
}

check_secrets() {
  local out
  if out=$(k -n "${NS}" create secret generic s1 --from-literal=password=hunter2 2>&1); then
    pass "secret: create s1"
  else
    fail "secret: create s1 failed: $(oneline "${out}")"; return
  fi
  out=$(k -n "${NS}" get secret s1 -o jsonpath='{.data.password}' 2>&1 | base64 -d 2>/dev/null)
  [[ "${out}" == hunter2 ]] && pass "secret: get s1 decodes to the stored value" ||
    fail "secret: get s1 returned '$(oneline "${out}")', want hunter2"
  out=$(k -n "${NS}" get secrets -o name 2>&1)
  grep -qx secret/s1 <<<"${out}" && pass "secret: list contains s1" || fail "secret: list lacks s1: $(oneline "${out}")"
  if out=$(k -n "${NS}" patch secret s1 --type=merge -p '{"stringData":{"password":"correct-horse"}}' 2>&1) &&
    [[ "$(k -n "${NS}" get secret s1 -o jsonpath='{.data.password}' 2>/dev/null | base64 -d 2>/dev/null)" == correct-horse ]]; then
    pass "secret: update s1 is read back"
  else
    fail "secret: update s1 failed: $(oneline "${out}")"
  fi
  k -n "${NS}" create secret generic s2 --from-literal=a=b >/dev/null 2>&1
  if out=$(k -n "${NS}" delete secret s2 --timeout=30s 2>&1) && not_found -n "${NS}" secret s2; then
    pass "secret: delete s2, then get is NotFound"
  else
    fail "secret: delete s2 failed or still readable: $(oneline "${out}")"
  fi
}

# watch_has WATCHFILE ERE: the kubectl watch output contains ERE
# (kubectl prints the events compact or indented depending on version: match either)
watch_has() { grep -Eq -- "$2" "$1" 2>/dev/null; }

# check_watch KIND NAME PATCH EXPECT_AFTER_PATCH: kubectl get -w sees MODIFIED and DELETED
check_watch() {
  local kind=$1 name=$2 patch=$3 expect=$4 wpid out
  local wf="${TMP}/watch-${kind//./_}-${name}.json"
  start_bg "${wf}" timeout 60 "${KUBECTL}" --kubeconfig "${KUBECONFIG_FILE}" -n "${NS}" get "${kind}" "${name}" \
    -w --output-watch-events -o json
  wpid=${BG_PID}
  if ! wait_until 20 watch_has "${wf}" '"type": ?"ADDED"'; then
    fail "watch ${kind}: kubectl get -w did not print the initial ADDED event: $(oneline "$(head -c 300 "${wf}")")"
    stop_pg "${wpid}"; return
  fi
  if ! out=$(k -n "${NS}" patch "${kind}" "${name}" --type=merge -p "${patch}" 2>&1); then
    fail "watch ${kind}: patch failed: $(oneline "${out}")"; stop_pg "${wpid}"; return
  fi
  if wait_until 20 watch_has "${wf}" '"type": ?"MODIFIED"' && wait_until 5 watch_has "${wf}" "${expect}"; then
    pass "watch ${kind}: kubectl get -w sees the update (MODIFIED with ${expect// \?/ })"
  else
    fail "watch ${kind}: no MODIFIED event with ${expect// \?/ } within 20s: $(oneline "$(tail -c 300 "${wf}")")"
  fi
  if ! out=$(k -n "${NS}" delete "${kind}" "${name}" --wait=false 2>&1); then
    fail "watch ${kind}: delete failed: $(oneline "${out}")"; stop_pg "${wpid}"; return
  fi
  if wait_until 20 watch_has "${wf}" '"type": ?"DELETED"'; then
    pass "watch ${kind}: kubectl get -w sees the delete (DELETED)"
  else
    fail "watch ${kind}: no DELETED event within 20s"
  fi
  stop_pg "${wpid}"
}

# Watch resumed from an old resourceVersion must replay history in order.
check_watch_from_rv() {
  local rv out
  k -n "${NS}" create configmap wrv --from-literal=step=0 >/dev/null 2>&1 ||
    { fail "watch from rv: cannot create configmap wrv"; return; }
  rv=$(k -n "${NS}" get configmap wrv -o jsonpath='{.metadata.resourceVersion}' 2>/dev/null)
  k -n "${NS}" patch configmap wrv --type=merge -p '{"data":{"step":"1"}}' >/dev/null 2>&1
  k -n "${NS}" patch configmap wrv --type=merge -p '{"data":{"step":"2"}}' >/dev/null 2>&1
  k -n "${NS}" delete configmap wrv >/dev/null 2>&1
  out=$(k get --raw "/api/v1/namespaces/${NS}/configmaps?watch=1&resourceVersion=${rv}&timeoutSeconds=3&fieldSelector=metadata.name%3Dwrv" 2>&1)
  local seq
  seq=$(grep -o '"type":"[A-Z]*"' <<<"${out}" | cut -d'"' -f4 | tr '\n' ' ')
  if [[ "${seq}" == "MODIFIED MODIFIED DELETED " ]] && [[ "${out}" == *'"step":"1"'*'"step":"2"'* ]]; then
    pass "watch from rv: resuming at resourceVersion ${rv} replays MODIFIED(1) MODIFIED(2) DELETED"
  else
    fail "watch from rv ${rv}: got events '${seq}': $(oneline "${out}")"
  fi
}

check_crd() {
  local out crd=widgets.e2e.quantykube.io
  if out=$(k apply -f "${MANIFESTS}/crd-widget.yaml" 2>&1) &&
    out=$(k wait --for=condition=Established --timeout=60s "crd/${crd}" 2>&1); then
    pass "crd: ${crd} created and Established"
  else
    fail "crd: ${crd} not created/established: $(oneline "${out}")"; return 1
  fi
  # discovery may lag a moment behind Established
  wait_until 30 bash -c "timeout 20 '${KUBECTL}' --kubeconfig '${KUBECONFIG_FILE}' api-resources --api-group=e2e.quantykube.io -o name 2>/dev/null | grep -q '^widgets'" ||
    fail "crd: widgets not in discovery after 30s"
  local i ok=1
  for i in 1 2 3; do
    sed "s/__NAME__/widget-${i}/" "${MANIFESTS}/widget.yaml" | k -n "${NS}" create -f - >/dev/null 2>"${TMP}/widget.err" || ok=0
  done
  [[ ${ok} == 1 ]] && pass "crd: created 3 Widget objects" ||
    { fail "crd: creating Widgets failed: $(oneline "$(cat "${TMP}/widget.err")")"; return 1; }
  out=$(k -n "${NS}" get widgets -l e2e=widget -o name 2>&1)
  [[ $(grep -c '^widget.e2e.quantykube.io/widget-' <<<"${out}") == 3 ]] && pass "crd: list returns 3 Widgets" ||
    fail "crd: list returned: $(oneline "${out}")"
  out=$(sed "s/__NAME__/widget-bad/; s/size: 1/size: -5/" "${MANIFESTS}/widget.yaml" | k -n "${NS}" create -f - 2>&1) &&
    fail "crd: a Widget violating the schema (size -5) was accepted" ||
    { [[ "${out}" == *Invalid* || "${out}" == *invalid* ]] && pass "crd: schema validation rejects size -5" ||
      fail "crd: invalid Widget failed with the wrong error: $(oneline "${out}")"; }
  if out=$(k -n "${NS}" patch widget widget-1 --type=merge -p '{"spec":{"size":7}}' 2>&1) &&
    [[ "$(k -n "${NS}" get widget widget-1 -o jsonpath='{.spec.size}' 2>&1)" == 7 ]]; then
    pass "crd: update widget-1 spec.size=7 is read back"
  else
    fail "crd: update widget-1 failed: $(oneline "${out}")"
  fi
  if out=$(k -n "${NS}" patch widget widget-1 --subresource=status --type=merge -p '{"status":{"phase":"Ready"}}' 2>&1) &&
    [[ "$(k -n "${NS}" get widget widget-1 -o jsonpath='{.status.phase}' 2>&1)" == Ready ]]; then
    pass "crd: status subresource update is read back"
  else
    fail "crd: status subresource update failed: $(oneline "${out}")"
  fi
  check_watch widget widget-2 '{"spec":{"color":"blue"}}' '"color": ?"blue"'
  if out=$(k -n "${NS}" delete widget widget-3 --timeout=30s 2>&1) && not_found -n "${NS}" widget widget-3; then
    pass "crd: delete widget-3, then get is NotFound"
  else
    fail "crd: delete widget-3 failed or still readable: $(oneline "${out}")"
  fi
  return 0
}

check_crd_delete() {
  local out crd=widgets.e2e.quantykube.io
  # widget-1 still exists in ${NS}: deleting the CRD must clean up its instances first
  if out=$(k delete crd "${crd}" --timeout=90s 2>&1) && not_found crd "${crd}"; then
    pass "crd: delete ${crd} completes (instances cleaned up, finalizer removed)"
  else
    fail "crd: delete ${crd} did not complete in 90s: $(oneline "${out}")"
  fi
}

check_events() {
  local out created
  if out=$(sed "s/__NAMESPACE__/${NS}/g" "${MANIFESTS}/event.yaml" | k create -f - 2>&1); then
    created=${SECONDS}
    pass "event: create e2e-ttl-event"
  else
    fail "event: create failed: $(oneline "${out}")"; return
  fi
  out=$(k -n "${NS}" get events -o name 2>&1)
  grep -q 'event/e2e-ttl-event' <<<"${out}" && pass "event: list contains e2e-ttl-event" ||
    fail "event: list lacks e2e-ttl-event: $(oneline "${out}")"
  # kube-apiserver attaches the event to a lease of --event-ttl (plus a small reuse margin);
  # the datastore must delete the key when the lease expires.
  # It must not go early either (a lease expiring long before its TTL loses data).
  local limit=$((EVENT_TTL_SECONDS + 60)) early=$((EVENT_TTL_SECONDS - 5)) gone_after
  if wait_until "${limit}" not_found -n "${NS}" event e2e-ttl-event; then
    gone_after=$((SECONDS - created))
    if ((gone_after < early)); then
      fail "event: disappeared only ${gone_after}s after creation, before its event-ttl of ${EVENT_TTL_SECONDS}s"
    else
      pass "event: disappeared ${gone_after}s after creation (event-ttl ${EVENT_TTL_SECONDS}s, lease expiry)"
    fi
  else
    fail "event: still present $((SECONDS - created))s after creation (event-ttl ${EVENT_TTL_SECONDS}s): lease expiry did not delete it"
  fi
}

# Restart kube-apiserver (and QuantyKube when we own it): everything must come back from disk.
check_restart() {
  local before after out
  before=$(k -n "${NS}" get configmap cm1 -o jsonpath='{.metadata.resourceVersion} {.data.k}' 2>&1)
  stop_pg ${KCM_PID} "${APISERVER_PID}"
  if [[ ${USING_QUANTYKUBE} == 1 ]]; then
    stop_pg "${QK_PID}"
    if ! start_quantykube; then fatal "restart: quantykube did not come back (see ${TMP}/quantykube.log)"; fi
  fi
  start_apiserver
  wait_apiserver_ready 120 || fatal "restart: ${READY_ERR} (log ${APISERVER_LOG})"
  start_controller_manager || fail "restart: kube-controller-manager did not start again"
  after=$(k -n "${NS}" get configmap cm1 -o jsonpath='{.metadata.resourceVersion} {.data.k}' 2>&1)
  if [[ "${after}" == "${before}" && "${after}" == *" v2" ]]; then
    pass "restart: cm1 unchanged after restarting $([[ ${USING_QUANTYKUBE} == 1 ]] && echo "quantykube and ")kube-apiserver (${after})"
  else
    fail "restart: cm1 was '${before}' before the restart, '${after}' after"
  fi
  if out=$(k -n "${NS}" patch configmap cm1 --type=merge -p '{"data":{"k":"v3"}}' -o jsonpath='{.metadata.resourceVersion}' 2>&1) &&
    [[ "${out}" =~ ^[0-9]+$ && ${out} -gt ${before%% *} ]]; then
    pass "restart: a write after the restart gets a higher resourceVersion (${before%% *} -> ${out})"
  else
    fail "restart: write after the restart failed or resourceVersion did not grow: $(oneline "${out}")"
  fi
}

check_namespace_deletion() {
  local out dns="${NS}-del"
  out=$(k create namespace "${dns}" 2>&1) || { fail "namespace deletion: create ${dns}: $(oneline "${out}")"; return; }
  k -n "${dns}" create configmap content --from-literal=a=b >/dev/null 2>&1 &&
    k -n "${dns}" create secret generic content --from-literal=a=b >/dev/null 2>&1 ||
    fail "namespace deletion: could not create content in ${dns}"
  local t0=${SECONDS}
  if ! out=$(k delete namespace "${dns}" --wait=false 2>&1); then
    fail "namespace deletion: delete ${dns} failed: $(oneline "${out}")"; return
  fi
  if wait_until 120 not_found namespace "${dns}"; then
    pass "namespace deletion: ${dns} (with a configmap and a secret) gone after $((SECONDS - t0))s"
  else
    fail "namespace deletion: ${dns} still present after 120s: $(oneline "$(k get namespace "${dns}" -o jsonpath='{.status}' 2>&1)")"
  fi
  out=$(k get --raw "/api/v1/namespaces/${dns}/configmaps" 2>&1)
  if [[ "${out}" == *'"items":[]'* ]]; then
    pass "namespace deletion: no configmaps left in ${dns}"
  else
    fail "namespace deletion: configmaps remain in ${dns}: $(oneline "${out}")"
  fi
}

# =============================================================================================
# HISTORY CHECKS (QuantyKube only) -- later steps add their checks here.
# Available: ${QK_BIN} (bin/quantykube), ${ETCD_ENDPOINT}, ${TMP} (db at ${TMP}/quantykube.db),
# ${NS} (live test namespace), k (bounded kubectl), pass/fail, wait_until, not_found.
# Example to add: create a ConfigMap, delete it, `"${QK_BIN}" history restore ...`, then check
# that `k -n "${NS}" get configmap NAME` returns the old data.
# When QUANTY_E2E_ETCD points at another datastore (USING_QUANTYKUBE=0), there is no History
# API, so these checks are not applicable and are not run (that mode only validates the script).
# =============================================================================================
history_checks() {
  if [[ ${USING_QUANTYKUBE} != 1 ]]; then
    log "history checks: not applicable (datastore is ${ETCD_ENDPOINT}, not bin/quantykube)"
    return 0
  fi
  local name=e2e-restored key uid before out uid2 data
  key="/registry/configmaps/${NS}/${name}"
  if ! k -n "${NS}" create configmap "${name}" --from-literal=state=precious >/dev/null; then
    fail "history: create configmap ${name}"; return 0
  fi
  uid=$(k -n "${NS}" get configmap "${name}" -o jsonpath='{.metadata.uid}')
  sleep 1
  before=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
  sleep 1
  if ! k -n "${NS}" delete configmap "${name}" --wait=true >/dev/null; then
    fail "history: delete configmap ${name}"; return 0
  fi
  if ! wait_until 30 not_found configmap "${name}" -n "${NS}"; then
    fail "history: configmap ${name} still visible after delete"; return 0
  fi
  if out=$(timeout 30 "${QK_BIN}" history log "${key}" --endpoints "${ETCD_ENDPOINT}" -o json 2>&1) &&
    grep -q '"deleted"' <<<"${out}"; then
    pass "history: log of ${key} shows the create and the delete"
  else
    fail "history: log of ${key}: $(oneline "${out}")"
  fi
  if ! out=$(timeout 30 "${QK_BIN}" history restore "${key}" --at "${before}" --endpoints "${ETCD_ENDPOINT}" 2>&1); then
    fail "history: restore ${key} --at ${before}: $(oneline "${out}")"; return 0
  fi
  pass "history: restore ${key} as of ${before}"
  # The apiserver's watch cache must follow the restore like any write.
  local i
  uid2=""
  for ((i = 0; i < 30; i++)); do
    uid2=$(k -n "${NS}" get configmap "${name}" -o jsonpath='{.metadata.uid}' 2>/dev/null) && [[ -n ${uid2} ]] && break
    sleep 1
  done
  data=$(k -n "${NS}" get configmap "${name}" -o jsonpath='{.data.state}' 2>/dev/null)
  if [[ -n ${uid} && ${uid2} == "${uid}" && ${data} == precious ]]; then
    pass "history: kubectl sees the restored configmap with the same uid (${uid}) and data"
  else
    fail "history: after restore: uid '${uid2}' (want '${uid}'), data '${data}' (want precious)"
  fi
  # The restored object is an ordinary object: it can be updated again.
  if k -n "${NS}" label configmap "${name}" restored=yes >/dev/null; then
    pass "history: the restored configmap accepts an update"
  else
    fail "history: update of the restored configmap"
  fi
}

# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------
main() {
  local t_start=${SECONDS}
  preflight
  TMP="$(mktemp -d "${TMPDIR:-/tmp}/quantykube-e2e.XXXXXX")" || fatal "setup: mktemp failed"
  log "temp dir ${TMP}"

  # The Kubernetes build is slow: start it first, in the background.
  local build_pid=""
  if [[ -x "${KUBE_APISERVER_BIN}" && -x "${KUBE_CM_BIN}" ]]; then
    log "kubernetes ${K8S_VERSION}: using cached binaries in ${CACHE_DIR}/bin"
  else
    log "kubernetes ${K8S_VERSION}: building in the background (log: ${TMP}/kubernetes-build.log)"
    start_bg "${TMP}/kubernetes-build.log" timeout "${E2E_BUILD_TIMEOUT}" bash "${SCRIPT}" --build-apiserver-only
    build_pid=${BG_PID}
  fi

  if gen_certs >"${TMP}/certs.log" 2>&1; then
    pass "setup: generated CA, front-proxy CA + client, serving, admin (system:masters) certs and SA keys"
  else
    fatal "setup: certificate generation failed: $(oneline "$(cat "${TMP}/certs.log")")"
  fi

  setup_datastore

  if [[ -n "${build_pid}" ]]; then
    local t_build=${SECONDS}
    wait "${build_pid}"
    local rc=$?
    if [[ ${rc} != 0 || ! -x "${KUBE_APISERVER_BIN}" || ! -x "${KUBE_CM_BIN}" ]]; then
      [[ ${rc} == 124 ]] && log "build timed out after ${E2E_BUILD_TIMEOUT}s"
      tail -30 "${TMP}/kubernetes-build.log" >&2
      fatal "build: kube-apiserver/kube-controller-manager ${K8S_VERSION} build failed (rc=${rc}, log ${TMP}/kubernetes-build.log)"
    fi
    pass "build: kube-apiserver and kube-controller-manager ${K8S_VERSION} built (waited $((SECONDS - t_build))s)"
  else
    pass "build: kube-apiserver and kube-controller-manager ${K8S_VERSION} (cached)"
  fi

  APISERVER_PORT=$(free_port) || fatal "setup: no free port"
  KCM_PORT=$(free_port) || fatal "setup: no free port"
  write_kubeconfig || fatal "setup: could not write kubeconfig"
  start_apiserver
  if wait_apiserver_ready 120; then
    pass "apiserver: kube-apiserver on https://127.0.0.1:${APISERVER_PORT} is ready (/readyz) with --etcd-servers=${ETCD_ENDPOINT}"
  else
    fatal "apiserver: ${READY_ERR} (log ${APISERVER_LOG})"
  fi
  if start_controller_manager; then
    pass "controller-manager: kube-controller-manager (namespace controller) running"
  else
    fail "controller-manager: kube-controller-manager exited (log ${TMP}/kube-controller-manager.log)"
  fi

  check_server_version
  check_namespaces
  check_configmaps
  check_paged_list
  check_secrets
  k -n "${NS}" create configmap watched --from-literal=k=before >/dev/null 2>&1 ||
    fail "watch configmap: could not create configmap 'watched'"
  check_watch configmap watched '{"data":{"k":"after"}}' '"k": ?"after"'
  check_watch_from_rv
  check_crd && check_crd_delete
  check_events
  check_restart
  check_namespace_deletion
  history_checks

  # finally the main test namespace itself
  local out
  if out=$(k delete namespace "${NS}" --wait=false 2>&1) && wait_until 120 not_found namespace "${NS}"; then
    pass "namespace deletion: ${NS} (all test content) deleted"
  else
    fail "namespace deletion: ${NS} not gone after 120s: $(oneline "${out}")"
  fi
  if ! is_alive "${APISERVER_PID}"; then fail "apiserver: kube-apiserver died during the run"; fi
  if [[ ${USING_QUANTYKUBE} == 1 ]] && ! is_alive "${QK_PID}"; then fail "datastore: quantykube died during the run"; fi
  log "run took $((SECONDS - t_start))s"
}

main "$@"

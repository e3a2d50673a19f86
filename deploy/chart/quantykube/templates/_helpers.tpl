{{/*
Names, labels and the checks of values every template relies on.
*/}}

{{- define "quantykube.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "quantykube.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "quantykube.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "quantykube.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "quantykube.selectorLabels" -}}
app.kubernetes.io/name: {{ include "quantykube.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The Service of the aggregated API (and, in-cluster, the store's ports). */}}
{{- define "quantykube.serviceName" -}}
{{- default (include "quantykube.fullname" .) .Values.apiService.serviceName }}
{{- end }}

{{- define "quantykube.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "quantykube.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "quantykube.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* runsStore: the release runs QuantyKube pods (every mode but external). */}}
{{- define "quantykube.runsStore" -}}
{{- if ne .Values.mode "external" }}true{{ end }}
{{- end }}

{{/* registers: the release creates the APIService. */}}
{{- define "quantykube.registers" -}}
{{- if and .Values.apiService.enabled .Values.apiService.register }}true{{ end }}
{{- end }}

{{/* replicates: the store streams itself to object storage (mode=sqlite only, ADR-052). */}}
{{- define "quantykube.replicates" -}}
{{- if and (eq .Values.mode "sqlite") .Values.replicate.url }}true{{ end }}
{{- end }}

{{/* servesAPI: the store pods serve --api-listen. */}}
{{- define "quantykube.servesAPI" -}}
{{- if and .Values.apiService.enabled (include "quantykube.runsStore" .) }}true{{ end }}
{{- end }}

{{/* certManager: cert-manager issues the serving certificate. */}}
{{- define "quantykube.certManager" -}}
{{- if and (include "quantykube.servesAPI" .) .Values.apiService.certManager.enabled (.Capabilities.APIVersions.Has "cert-manager.io/v1") }}true{{ end }}
{{- end }}

{{- define "quantykube.servingSecret" -}}
{{- if include "quantykube.certManager" . }}
{{- printf "%s-api-tls" (include "quantykube.fullname" .) }}
{{- else }}
{{- .Values.apiService.tls.existingSecret }}
{{- end }}
{{- end }}

{{/* The store's identity as an RBAC subject. */}}
{{- define "quantykube.storeSubject" -}}
{{- if or (eq .Values.mode "external") .Values.apiService.kubeconfigSecret }}
{{- $s := .Values.rbac.storeSubject }}
{{- if eq $s.kind "ServiceAccount" }}
kind: ServiceAccount
name: {{ $s.name | quote }}
namespace: {{ default .Release.Namespace $s.namespace | quote }}
{{- else }}
kind: {{ $s.kind }}
apiGroup: rbac.authorization.k8s.io
name: {{ $s.name | quote }}
{{- end }}
{{- else }}
kind: ServiceAccount
name: {{ include "quantykube.serviceAccountName" . | quote }}
namespace: {{ .Release.Namespace | quote }}
{{- end }}
{{- end }}

{{/*
validate fails the release with a message that says what to give, for
every combination of values the templates cannot render correctly.
*/}}
{{- define "quantykube.validate" -}}
{{- $modes := list "sqlite" "replicas" "sidecar" "external" }}
{{- if not (has .Values.mode $modes) }}
{{- fail (printf "mode %q: want one of sqlite, replicas, sidecar, external" .Values.mode) }}
{{- end }}
{{- if and (has .Values.mode (list "replicas" "sidecar")) (not .Values.database.existingSecret) }}
{{- fail (printf "mode=%s needs database.existingSecret: a Secret whose key %q holds the database URL (kubectl create secret generic NAME --from-literal=%s='postgres://...')" .Values.mode .Values.database.endpointKey .Values.database.endpointKey) }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.apiService.enabled .Values.apiService.register }}
{{- fail "mode=sidecar: the APIService belongs in the tenant cluster, whose kube-apiserver runs in the pod: set apiService.register=false here and install mode=external against the tenant (docs/helm/sidecar.md)" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") (not .Values.sidecar.kubeApiserver.pkiSecret) }}
{{- fail "mode=sidecar needs sidecar.kubeApiserver.pkiSecret: the tenant kube-apiserver's certificates (docs/helm/sidecar.md)" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.apiService.enabled (not .Values.apiService.kubeconfigSecret) }}
{{- fail "mode=sidecar with apiService.enabled needs apiService.kubeconfigSecret: a kubeconfig of the tenant cluster the store asks about callers (the pod's service account belongs to this cluster, not the tenant's)" }}
{{- end }}
{{- if eq .Values.mode "external" }}
{{- if not .Values.apiService.register }}
{{- fail "mode=external only registers the aggregated API: apiService.register=false leaves it nothing to do" }}
{{- end }}
{{- if not .Values.external.address }}
{{- fail "mode=external needs external.address: the store's IP address as kube-apiserver reaches it" }}
{{- end }}
{{- if or (hasPrefix "127." .Values.external.address) (eq .Values.external.address "::1") }}
{{- fail (printf "external.address %s is a loopback address: kube-apiserver refuses EndpointSlices that point there" .Values.external.address) }}
{{- end }}
{{- if not .Values.apiService.caBundle }}
{{- fail "mode=external needs apiService.caBundle: the base64 PEM of the CA that signed the store's --api-cert (quantykube apiservice writes it as ca.crt)" }}
{{- end }}
{{- end }}
{{- if and (include "quantykube.servesAPI" .) (not (include "quantykube.certManager" .)) }}
{{- if not .Values.apiService.tls.existingSecret }}
{{- fail "apiService: no serving certificate. Install cert-manager (cert-manager.io/v1) and keep apiService.certManager.enabled, or give apiService.tls.existingSecret (a kubernetes.io/tls Secret for <serviceName>.<namespace>.svc) and apiService.caBundle (its CA, base64 PEM)" }}
{{- end }}
{{- if and .Values.apiService.register (not .Values.apiService.caBundle) }}
{{- fail "apiService.tls.existingSecret needs apiService.caBundle: the base64 PEM of the CA that signed it, for the APIService" }}
{{- end }}
{{- end }}
{{- if and .Values.replicate.url (ne .Values.mode "sqlite") }}
{{- fail (printf "replicate.url: replication to object storage serves SQLite only (ADR-052), not mode=%s. For PostgreSQL and MySQL use the database's point-in-time recovery, or run quantykube migrate --to sqlite:// beside the servers (docs/backup.md)" .Values.mode) }}
{{- end }}
{{- if and .Values.replicate.url .Values.replicate.caSecret }}
{{- if not (hasPrefix "s3://" .Values.replicate.url) }}
{{- fail "replicate.caSecret: a CA verifies an s3:// endpoint only; a file:// URL takes none" }}
{{- end }}
{{- if regexMatch "[?&]ca-file=" .Values.replicate.url }}
{{- fail "replicate.url has ca-file= and replicate.caSecret gives the CA too: give it once (replicate.caSecret mounts ca.crt and passes --replicate-ca-file)" }}
{{- end }}
{{- end }}
{{- if not (has .Values.replicas.antiAffinity (list "soft" "hard")) }}
{{- fail (printf "replicas.antiAffinity %q: want soft or hard" .Values.replicas.antiAffinity) }}
{{- end }}
{{- if not (has .Values.apiService.restoreCheck (list "dry-run" "none")) }}
{{- fail (printf "apiService.restoreCheck %q: want dry-run or none" .Values.apiService.restoreCheck) }}
{{- end }}
{{- end }}

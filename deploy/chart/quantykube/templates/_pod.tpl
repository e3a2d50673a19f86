{{/*
The store's container, volumes and pod settings, shared by the StatefulSet
(mode=sqlite), the Deployment (mode=replicas) and the tenant control
plane (mode=sidecar). A chart that runs kube-apiserver itself, with this
one as a subchart (mode=sidecar, sidecar.controlPlane=false), puts
QuantyKube in its own pod with
  metadata:
    labels:
      {{- include "quantykube.selectorLabels" .Subcharts.quantykube | nindent 6 }}
  spec:
    securityContext:
      {{- include "quantykube.podSecurityContext" .Subcharts.quantykube | nindent 6 }}
    initContainers:
      {{- include "quantykube.container" .Subcharts.quantykube | nindent 6 }}
    volumes:
      {{- include "quantykube.volumes" .Subcharts.quantykube | nindent 6 }}
and its kube-apiserver's --etcd-servers=unix://<sidecar.socketDir>/etcd.sock
(test/e2e/testdata/chart-include is such a chart).
*/}}

{{/* Where the store's files are mounted. */}}
{{- define "quantykube.paths" -}}
data: /var/lib/quantykube
apiTLS: /etc/quantykube/api
frontProxy: /etc/quantykube/front-proxy
reviewer: /etc/quantykube/reviewer
dbCA: /etc/quantykube/db
etcdTLS: /etc/quantykube/etcd-tls
replicateKey: /etc/quantykube/replicate-key
replicateCA: /etc/quantykube/replicate-ca
{{- end }}

{{/* The restricted Pod Security profile, for every container. */}}
{{- define "quantykube.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "quantykube.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
# The volume's files belong to the store's group, so that uid 65532 may
# write the SQLite database on any volume plugin.
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The store's `quantykube serve` arguments. */}}
{{- define "quantykube.args" -}}
{{- $p := include "quantykube.paths" . | fromYaml -}}
- serve
{{- if eq .Values.mode "sidecar" }}
- --listen-address=unix://{{ .Values.sidecar.socketDir }}/etcd.sock
{{- else }}
- --listen-address=0.0.0.0:{{ .Values.serve.port }}
{{- end }}
{{- if eq .Values.mode "sqlite" }}
- --endpoint=sqlite://{{ $p.data }}/state.db
{{- if include "quantykube.replicates" . }}
- {{ printf "--replicate=%s" .Values.replicate.url | quote }}
{{- if .Values.replicate.encryptionKeySecret }}
- --replicate-encryption-key-file={{ $p.replicateKey }}/replicate.key
{{- end }}
{{- if .Values.replicate.caSecret }}
- --replicate-ca-file={{ $p.replicateCA }}/ca.crt
{{- end }}
{{- end }}
{{- else }}
- --endpoint=$(QUANTYKUBE_ENDPOINT)
{{- if .Values.database.listenEndpointKey }}
- --datastore-listen-endpoint=$(QUANTYKUBE_LISTEN_ENDPOINT)
{{- end }}
{{- if .Values.database.caSecret }}
- --datastore-cafile={{ $p.dbCA }}/ca.crt
{{- end }}
{{- end }}
{{- if .Values.database.maxOpenConnections }}
- --datastore-max-open-connections={{ .Values.database.maxOpenConnections }}
{{- end }}
{{- if and .Values.serve.tls.existingSecret (ne .Values.mode "sidecar") }}
- --cert-file={{ $p.etcdTLS }}/tls.crt
- --key-file={{ $p.etcdTLS }}/tls.key
- --trusted-ca-file={{ $p.etcdTLS }}/ca.crt
{{- end }}
- --metrics-listen-address=0.0.0.0:{{ .Values.serve.metricsPort }}
- --log-format={{ .Values.serve.logFormat }}
- --log-level={{ .Values.serve.logLevel }}
{{- if include "quantykube.servesAPI" . }}
- --api-listen=0.0.0.0:{{ .Values.apiService.port }}
- --api-cert={{ $p.apiTLS }}/tls.crt
- --api-key={{ $p.apiTLS }}/tls.key
- --api-client-ca={{ $p.frontProxy }}/ca.crt
- --api-allowed-names={{ join "," .Values.apiService.allowedNames }}
- --api-restore-check={{ .Values.apiService.restoreCheck }}
{{- if .Values.apiService.kubeconfigSecret }}
- --api-kubeconfig={{ $p.reviewer }}/kubeconfig
{{- end }}
{{- end }}
{{- with .Values.serve.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "quantykube.probe" -}}
httpGet:
  path: {{ .path }}
  port: metrics
  scheme: HTTP
{{- end }}

{{/*
The store's container. In mode=sidecar it is a native sidecar (an init
container that keeps running): it starts, and its startup probe passes,
before kube-apiserver starts.
*/}}
{{- define "quantykube.container" -}}
{{- $p := include "quantykube.paths" . | fromYaml -}}
- name: quantykube
  image: {{ include "quantykube.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if eq .Values.mode "sidecar" }}
  restartPolicy: Always
  {{- end }}
  args:
    {{- include "quantykube.args" . | nindent 4 }}
  {{- if ne .Values.mode "sqlite" }}
  env:
    - name: QUANTYKUBE_ENDPOINT
      valueFrom:
        secretKeyRef:
          name: {{ .Values.database.existingSecret }}
          key: {{ .Values.database.endpointKey }}
    {{- if .Values.database.listenEndpointKey }}
    - name: QUANTYKUBE_LISTEN_ENDPOINT
      valueFrom:
        secretKeyRef:
          name: {{ .Values.database.existingSecret }}
          key: {{ .Values.database.listenEndpointKey }}
    {{- end }}
  {{- end }}
  {{- if and (include "quantykube.replicates" .) .Values.replicate.credentialsSecret }}
  # The object store's credentials (AWS_ACCESS_KEY_ID, ...), as the AWS
  # SDK reads them.
  envFrom:
    - secretRef:
        name: {{ .Values.replicate.credentialsSecret }}
  {{- end }}
  ports:
    {{- if ne .Values.mode "sidecar" }}
    - name: client
      containerPort: {{ .Values.serve.port }}
      protocol: TCP
    {{- end }}
    - name: metrics
      containerPort: {{ .Values.serve.metricsPort }}
      protocol: TCP
    {{- if include "quantykube.servesAPI" . }}
    - name: api
      containerPort: {{ .Values.apiService.port }}
      protocol: TCP
    {{- end }}
  # Startup: the database answers and the schema is this binary's (a
  # migration may take a while). Liveness never waits on the database (a
  # slow database fails readiness, and a restart would not help it).
  startupProbe:
    {{- include "quantykube.probe" (dict "path" "/readyz") | nindent 4 }}
    periodSeconds: 5
    timeoutSeconds: 5
    failureThreshold: 60
  livenessProbe:
    {{- include "quantykube.probe" (dict "path" "/livez") | nindent 4 }}
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 6
  readinessProbe:
    {{- include "quantykube.probe" (dict "path" "/readyz") | nindent 4 }}
    periodSeconds: 5
    timeoutSeconds: 5
    failureThreshold: 3
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- include "quantykube.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    {{- if eq .Values.mode "sqlite" }}
    # The store, and the copy replication takes of it for a base.
    - name: data
      mountPath: {{ $p.data }}
    {{- end }}
    # SQLite's and Go's temporary files; the root file system is read-only.
    - name: tmp
      mountPath: /tmp
    {{- if eq .Values.mode "sidecar" }}
    - name: quantykube-socket
      mountPath: {{ .Values.sidecar.socketDir }}
    {{- end }}
    {{- if .Values.database.caSecret }}
    - name: db-ca
      mountPath: {{ $p.dbCA }}
      readOnly: true
    {{- end }}
    {{- if include "quantykube.replicates" . }}
    {{- if .Values.replicate.encryptionKeySecret }}
    - name: replicate-key
      mountPath: {{ $p.replicateKey }}
      readOnly: true
    {{- end }}
    {{- if .Values.replicate.caSecret }}
    - name: replicate-ca
      mountPath: {{ $p.replicateCA }}
      readOnly: true
    {{- end }}
    {{- end }}
    {{- if and .Values.serve.tls.existingSecret (ne .Values.mode "sidecar") }}
    - name: etcd-tls
      mountPath: {{ $p.etcdTLS }}
      readOnly: true
    {{- end }}
    {{- if include "quantykube.servesAPI" . }}
    - name: api-tls
      mountPath: {{ $p.apiTLS }}
      readOnly: true
    - name: front-proxy-ca
      mountPath: {{ $p.frontProxy }}
      readOnly: true
    {{- if .Values.apiService.kubeconfigSecret }}
    - name: reviewer
      mountPath: {{ $p.reviewer }}
      readOnly: true
    {{- end }}
    {{- end }}
{{- end }}

{{/* The volumes the store's container mounts (but sqlite's data). */}}
{{- define "quantykube.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 1Gi
{{- if eq .Values.mode "sidecar" }}
# The socket kube-apiserver dials (--etcd-servers=unix://...): in memory,
# seen by the pod's two containers only. QuantyKube makes it 0600, so both
# run as uid 65532.
- name: quantykube-socket
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- if .Values.database.caSecret }}
- name: db-ca
  secret:
    secretName: {{ .Values.database.caSecret }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- if include "quantykube.replicates" . }}
{{- if .Values.replicate.encryptionKeySecret }}
- name: replicate-key
  secret:
    secretName: {{ .Values.replicate.encryptionKeySecret }}
    items:
      - key: replicate.key
        path: replicate.key
{{- end }}
{{- if .Values.replicate.caSecret }}
- name: replicate-ca
  secret:
    secretName: {{ .Values.replicate.caSecret }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end }}
{{- if and .Values.serve.tls.existingSecret (ne .Values.mode "sidecar") }}
- name: etcd-tls
  secret:
    secretName: {{ .Values.serve.tls.existingSecret }}
{{- end }}
{{- if include "quantykube.servesAPI" . }}
- name: api-tls
  secret:
    secretName: {{ include "quantykube.servingSecret" . }}
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- if eq .Values.mode "sidecar" }}
- name: front-proxy-ca
  secret:
    secretName: {{ .Values.sidecar.kubeApiserver.pkiSecret }}
    items:
      - key: front-proxy-ca.crt
        path: ca.crt
{{- else }}
- name: front-proxy-ca
  configMap:
    name: {{ default (printf "%s-front-proxy-ca" (include "quantykube.fullname" .)) .Values.apiService.clientCA.existingConfigMap }}
    items:
      - key: {{ if .Values.apiService.clientCA.existingConfigMap }}{{ .Values.apiService.clientCA.key }}{{ else }}ca.crt{{ end }}
        path: ca.crt
{{- end }}
{{- if .Values.apiService.kubeconfigSecret }}
- name: reviewer
  secret:
    secretName: {{ .Values.apiService.kubeconfigSecret }}
    items:
      - key: kubeconfig
        path: kubeconfig
{{- end }}
{{- end }}
{{- end }}

{{/* Scheduling and identity, the same for every store pod. */}}
{{- define "quantykube.podSpecCommon" -}}
serviceAccountName: {{ include "quantykube.serviceAccountName" . }}
{{- /* The token is needed only to ask this cluster's kube-apiserver about callers. */}}
automountServiceAccountToken: {{ if and (include "quantykube.servesAPI" .) (not .Values.apiService.kubeconfigSecret) }}true{{ else }}false{{ end }}
enableServiceLinks: false
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
securityContext:
  {{- include "quantykube.podSecurityContext" . | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "quantykube.podMetadata" -}}
labels:
  {{- include "quantykube.selectorLabels" . | nindent 2 }}
  {{- with .Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

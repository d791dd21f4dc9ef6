{{/* Names, labels and the service flags shared by every template. */}}

{{- define "headwater.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "headwater.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "headwater.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "headwater.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: headwater
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* selector labels of one component: include "headwater.selector" (list . "broker") */}}
{{- define "headwater.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "headwater.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "headwater.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "headwater.operatorImage" -}}
{{- printf "%s:%s" .Values.operator.image.repository (default .Chart.AppVersion .Values.operator.image.tag) -}}
{{- end -}}

{{/* HOST:PORT of etcd for the services' --etcd */}}
{{- define "headwater.etcdEndpoint" -}}
{{- if .Values.etcd.enabled -}}
{{- printf "%s-etcd:%d" (include "headwater.fullname" .) (int .Values.etcd.clientPort) -}}
{{- else -}}
{{- required "etcd.external.endpoint is required when etcd.enabled is false" .Values.etcd.external.endpoint -}}
{{- end -}}
{{- end -}}

{{/* HOST:PORT,... of the brokers (clients' bootstrap) */}}
{{- define "headwater.bootstrap" -}}
{{- printf "%s-broker:%d" (include "headwater.fullname" .) (int .Values.broker.port) -}}
{{- end -}}

{{- define "headwater.tlsSecret" -}}
{{- required "tls.secretName is required when tls.enabled is true" .Values.tls.secretName -}}
{{- end -}}

{{/* security flags (docs/security.md) as YAML list items of a container's args */}}
{{- define "headwater.securityFlags" -}}
{{- if .Values.tls.enabled }}
- --tls-cert=/etc/headwater/tls/tls.crt
- --tls-key=/etc/headwater/tls/tls.key
- --tls-ca=/etc/headwater/tls/ca.crt
- --tls-client-auth={{ .Values.tls.clientAuth }}
{{- if .Values.tls.principalMappingRules }}
- --principal-mapping-rules={{ .Values.tls.principalMappingRules }}
{{- end }}
{{- end }}
{{- if and (not .Values.etcd.enabled) .Values.etcd.external.tlsSecretName }}
- --etcd-ca=/etc/headwater/etcd-tls/ca.crt
- --etcd-cert=/etc/headwater/etcd-tls/tls.crt
- --etcd-key=/etc/headwater/etcd-tls/tls.key
{{- end }}
{{- if .Values.authorizer.enabled }}
- --authorizer
- --super-users={{ .Values.authorizer.superUsers }}
{{- if .Values.authorizer.allowEveryoneIfNoAclFound }}
- --allow-everyone-if-no-acl-found
{{- end }}
{{- end }}
{{- end -}}

{{- define "headwater.securityVolumeMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/headwater/tls
  readOnly: true
{{- end }}
{{- if and (not .Values.etcd.enabled) .Values.etcd.external.tlsSecretName }}
- name: etcd-tls
  mountPath: /etc/headwater/etcd-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "headwater.securityVolumes" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "headwater.tlsSecret" . }}
    defaultMode: 0440
{{- end }}
{{- if and (not .Values.etcd.enabled) .Values.etcd.external.tlsSecretName }}
- name: etcd-tls
  secret:
    secretName: {{ .Values.etcd.external.tlsSecretName }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* Probes. Startup and liveness: the process is up (the gRPC health name "liveness"); readiness:
the overall gRPC health "" (a broker: SERVING only once it has the cluster's metadata from the
controller), so a broker waiting for a controller is kept out of the Services and a rolling
update waits for it, but it is not restarted. Kubernetes' grpc probe speaks plaintext only, so
with TLS startup and liveness use tcpSocket and readiness the same status over the plain-HTTP
metrics port (/ready: 200 or 503). */}}
{{- define "headwater.probes" -}}
{{- $ := index . 0 -}}
{{- $port := index . 1 -}}
{{- if $.Values.tls.enabled }}
startupProbe:
  tcpSocket: {port: grpc}
  periodSeconds: 2
  failureThreshold: 90
readinessProbe:
  httpGet: {path: /ready, port: metrics}
  periodSeconds: 5
livenessProbe:
  tcpSocket: {port: grpc}
  periodSeconds: 10
  failureThreshold: 6
{{- else }}
startupProbe:
  grpc: {port: {{ $port }}, service: liveness}
  periodSeconds: 2
  failureThreshold: 90
readinessProbe:
  grpc: {port: {{ $port }}}
  periodSeconds: 5
livenessProbe:
  grpc: {port: {{ $port }}, service: liveness}
  periodSeconds: 10
  failureThreshold: 6
{{- end }}
{{- end -}}

{{- define "headwater.podSpecCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
{{- toYaml .Values.podSecurityContext | nindent 2 }}
enableServiceLinks: false
{{- end -}}

{{/* environment every service container gets */}}
{{- define "headwater.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef: {fieldPath: metadata.namespace}
- name: POD_IP
  valueFrom:
    fieldRef: {fieldPath: status.podIP}
- name: GLIBC_TUNABLES
  value: glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=536870912
{{- end -}}

{{/* what the operator does to its resources (kopf: watch, patch status and finalizers, events) */}}
{{- define "headwater.operatorRules" -}}
- apiGroups: [headwater.dev]
  resources: [topics, consumergroups]
  verbs: [get, list, watch, patch, update]
- apiGroups: [headwater.dev]
  resources: [topics/status, consumergroups/status]
  verbs: [get, patch, update]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{/* The release's objects are named after the release (one node per release). */}}
{{- define "strata.fullname" -}}
{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image reference. */}}
{{- define "strata.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Labels that select this node's pods (immutable in selectors). */}}
{{- define "strata.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .Values.role }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "strata.labels" -}}
{{ include "strata.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: strata
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
strata.dev/node: {{ .Values.node }}
{{- end }}

{{/* The Secret holding the files the configuration names. */}}
{{- define "strata.secretName" -}}
{{- if and .Values.existingSecret .Values.secretFiles -}}
{{ fail "existingSecret and secretFiles exclude each other: give one" }}
{{- else if .Values.existingSecret -}}
{{ .Values.existingSecret }}
{{- else if .Values.secretFiles -}}
{{ include "strata.fullname" . }}-files
{{- else -}}
{{ fail "existingSecret (the Secret made from the rendered secret.yaml) or secretFiles is required" }}
{{- end -}}
{{- end }}

{{/* The configuration, checked against what the chart's values say. */}}
{{- define "strata.config" -}}
{{- $config := required "config: the node's configuration (relay topology render --helm writes it)" .Values.config -}}
{{- if and .Values.proxy.httpsProxy (regexMatch "transport:\\s*quic" $config) -}}
{{ fail "proxy.httpsProxy: the configuration's transport is quic, which never uses a proxy: set transport auto or tcp" }}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not (regexMatch "(?m)^store:\\s*\\{?\\s*etcd" $config)) -}}
{{ fail "replicas: several replicas of one node need the root's store in etcd (store: { etcd: ... })" }}
{{- end -}}
{{- if and (eq .Values.role "agent") (gt (int .Values.replicas) 1) -}}
{{ fail "replicas: an agent runs one replica" }}
{{- end -}}
{{ $config }}
{{- end }}

{{/* Environment of every node: log format and level, proxy. */}}
{{- define "strata.env" -}}
- name: STRATA_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: RUST_LOG
  value: {{ .Values.logLevel | quote }}
{{- with .Values.proxy.httpsProxy }}
- name: HTTPS_PROXY
  value: {{ . | quote }}
{{- end }}
{{- with .Values.proxy.noProxy }}
- name: NO_PROXY
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* Probes on the metrics listener. */}}
{{- define "strata.probes" -}}
startupProbe:
  httpGet: { path: /healthz, port: metrics }
  {{- toYaml .Values.probes.startup | nindent 2 }}
livenessProbe:
  httpGet: { path: /healthz, port: metrics }
  {{- toYaml .Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: { path: /readyz, port: metrics }
  {{- toYaml .Values.probes.readiness | nindent 2 }}
{{- end }}

{{/* Scheduling: node selector, affinity, tolerations. */}}
{{- define "strata.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector: {{ toJson . }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{ toJson . }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{ toJson . }}
{{- end }}
{{- end }}

{{/* The pod's spec after its service account: the node's container and volumes. The
state volume (a PersistentVolumeClaim) is the caller's. */}}
{{- define "strata.podSpec" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile: { type: RuntimeDefault }
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{ toJson . }}
{{- end }}
{{- include "strata.scheduling" . }}
terminationGracePeriodSeconds: 15
containers:
  - name: {{ .Values.role }}
    image: {{ include "strata.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    {{- if eq .Values.role "relay" }}
    command: [/usr/local/bin/relay]
    args: [serve, --config, /etc/strata/config/config.yaml]
    {{- else }}
    command: [/usr/local/bin/agent]
    args: [run, --config, /etc/strata/config/config.yaml]
    {{- end }}
    env:
      {{- include "strata.env" . | nindent 6 }}
    ports:
      {{- if eq .Values.role "relay" }}
      - { name: quic, containerPort: {{ required "ports.quic" .Values.ports.quic }}, protocol: UDP }
      - { name: tls, containerPort: {{ .Values.ports.tcp | default .Values.ports.quic }}, protocol: TCP }
      {{- with .Values.ports.api }}
      - { name: api, containerPort: {{ . }}, protocol: TCP }
      {{- end }}
      {{- end }}
      - { name: metrics, containerPort: {{ .Values.ports.metrics }}, protocol: TCP }
    {{- include "strata.probes" . | nindent 4 }}
    resources: {{ toJson .Values.resources }}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: { drop: [ALL] }
    volumeMounts:
      - { name: config, mountPath: /etc/strata/config, readOnly: true }
      - { name: secret, mountPath: /etc/strata/secret, readOnly: true }
      - { name: state, mountPath: /etc/strata/state }
volumes:
  - name: config
    secret: { secretName: {{ include "strata.fullname" . }}-config, defaultMode: 288 }  # 0440
  - name: secret
    secret: { secretName: {{ include "strata.secretName" . }}, defaultMode: 288 }  # 0440
{{- end }}

{{/* Annotations of the pod: a new configuration rolls it. */}}
{{- define "strata.podAnnotations" -}}
checksum/config: {{ include "strata.config" . | sha256sum | trunc 16 }}
checksum/secret: {{ printf "%s%v" (include "strata.secretName" .) .Values.secretFiles | sha256sum | trunc 16 }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.ports.metrics | quote }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The image reference. */}}
{{- define "strata.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "strata.labels" -}}
app.kubernetes.io/part-of: strata
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
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

{{/* Pod and container security: the image's unprivileged user, nothing else. */}}
{{- define "strata.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: { type: RuntimeDefault }
{{- end }}
{{- define "strata.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: { drop: [ALL] }
{{- end }}

{{/* One relay: its config, Service and StatefulSet. Called with (dict "top" $ "node" NODE "root" BOOL). */}}
{{- define "strata.relay" -}}
{{- $top := .top -}}
{{- $node := .node -}}
{{- $name := printf "%s-%s" $top.Release.Name $node.name | trunc 63 | trimSuffix "-" -}}
{{- $storage := merge (dict) ($node.storage | default dict) $top.Values.relayDefaults.storage -}}
{{- $resources := $node.resources | default $top.Values.relayDefaults.resources -}}
{{- $etcd := and .root ($node.etcd | default dict).endpoints -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}
  labels:
    {{- include "strata.labels" $top | nindent 4 }}
    app.kubernetes.io/name: strata-relay
    strata.dev/node: {{ $node.name }}
data:
  config.yaml: |
    node: {{ $node.name }}
    listen: 0.0.0.0:{{ $top.Values.ports.quic }}
    {{- if not .root }}
    parent: { name: {{ required (printf "relays[%s].parent" $node.name) $node.parent }}, address: {{ include "strata.parentAddress" (dict "top" $top "parent" $node.parent "address" $node.parentAddress "what" (printf "relays[%s].parentAddress" $node.name)) | quote }} }
    {{- end }}
    tls: { cert: /etc/strata/tls/tls.crt, key: /etc/strata/tls/tls.key, ca: /etc/strata/tls/ca.crt }
    data: /var/lib/strata/data
    children: {{ $node.children | default list | toJson }}
    labels: {{ $node.labels | default dict | toJson }}
    metrics: 0.0.0.0:{{ $top.Values.ports.metrics }}
    {{- if .root }}
    api: { listen: 0.0.0.0:{{ $top.Values.ports.api }}, tokens: /etc/strata/api/api.tokens }
    {{- end }}
    {{- if $etcd }}
    store: { etcd: { endpoints: {{ toJson $node.etcd.endpoints }}, prefix: {{ $node.etcd.prefix | default (printf "/strata/%s" $node.name) | quote }}, lease_ttl_s: {{ $node.etcd.leaseTtlSeconds | default 5 }}
      {{- if $node.etcd.tlsSecret }}, tls: { ca: /etc/strata/etcd/ca.crt, cert: /etc/strata/etcd/tls.crt, key: /etc/strata/etcd/tls.key }{{ end }} } }
    {{- end }}
    {{- if $node.joinSecret }}
    join: { tokens: /etc/strata/join/join.tokens, ca_cert: /etc/strata/join/join-ca.crt, ca_key: /etc/strata/join/join-ca.key }
    {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  labels:
    {{- include "strata.labels" $top | nindent 4 }}
    app.kubernetes.io/name: strata-relay
    strata.dev/node: {{ $node.name }}
spec:
  type: {{ $node.serviceType | default "ClusterIP" }}
  {{- with $node.clusterIP }}
  clusterIP: {{ . }}
  {{- end }}
  {{- if $etcd }}
  # Ready pods only: the writer (standbys answer /readyz 503), so API writes reach it.
  publishNotReadyAddresses: false
  {{- end }}
  selector:
    app.kubernetes.io/instance: {{ $top.Release.Name }}
    strata.dev/node: {{ $node.name }}
  ports:
    - { name: quic, port: {{ $top.Values.ports.quic }}, targetPort: quic, protocol: UDP }
    {{- if .root }}
    - { name: api, port: {{ $top.Values.ports.api }}, targetPort: api, protocol: TCP }
    {{- end }}
    - { name: metrics, port: {{ $top.Values.ports.metrics }}, targetPort: metrics, protocol: TCP }
{{- if $etcd }}
---
# Every replica by name, ready or not (standbys serve children from the etcd watch):
# children get <pod>.<this Service> of each replica.
apiVersion: v1
kind: Service
metadata:
  name: {{ include "strata.replicasService" $name }}
  labels:
    {{- include "strata.labels" $top | nindent 4 }}
    app.kubernetes.io/name: strata-relay
    strata.dev/node: {{ $node.name }}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector:
    app.kubernetes.io/instance: {{ $top.Release.Name }}
    strata.dev/node: {{ $node.name }}
  ports:
    - { name: quic, port: {{ $top.Values.ports.quic }}, targetPort: quic, protocol: UDP }
{{- end }}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ $name }}
  labels:
    {{- include "strata.labels" $top | nindent 4 }}
    app.kubernetes.io/name: strata-relay
    strata.dev/node: {{ $node.name }}
spec:
  # One process holds a node's sled store: never two replicas of one node. A root on
  # etcd runs several: one writes (and is ready), the others wait on its etcd lease.
  replicas: {{ if $etcd }}{{ $node.etcd.replicas | default 2 }}{{ else }}1{{ end }}
  serviceName: {{ if $etcd }}{{ include "strata.replicasService" $name }}{{ else }}{{ $name }}{{ end }}
  podManagementPolicy: Parallel
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ $top.Release.Name }}
      strata.dev/node: {{ $node.name }}
  template:
    metadata:
      labels:
        app.kubernetes.io/instance: {{ $top.Release.Name }}
        app.kubernetes.io/name: strata-relay
        strata.dev/node: {{ $node.name }}
      annotations:
        checksum/config: {{ toJson $node | sha256sum | trunc 16 }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $top.Values.ports.metrics | quote }}
    spec:
      securityContext:
        {{- include "strata.podSecurity" $top | nindent 8 }}
      {{- with $top.Values.imagePullSecrets }}
      imagePullSecrets: {{ toJson . }}
      {{- end }}
      {{- with $top.Values.relayDefaults.nodeSelector }}
      nodeSelector: {{ toJson . }}
      {{- end }}
      {{- with $top.Values.relayDefaults.tolerations }}
      tolerations: {{ toJson . }}
      {{- end }}
      terminationGracePeriodSeconds: 15
      containers:
        - name: relay
          image: {{ include "strata.image" $top }}
          imagePullPolicy: {{ $top.Values.image.pullPolicy }}
          command: [/usr/local/bin/relay]
          args: [serve, --config, /etc/strata/config/config.yaml]
          env:
            {{- include "strata.env" $top | nindent 12 }}
          ports:
            - { name: quic, containerPort: {{ $top.Values.ports.quic }}, protocol: UDP }
            {{- if .root }}
            - { name: api, containerPort: {{ $top.Values.ports.api }}, protocol: TCP }
            {{- end }}
            - { name: metrics, containerPort: {{ $top.Values.ports.metrics }}, protocol: TCP }
          {{- include "strata.probes" $top | nindent 10 }}
          resources: {{ toJson $resources }}
          securityContext:
            {{- include "strata.containerSecurity" $top | nindent 12 }}
          volumeMounts:
            - { name: config, mountPath: /etc/strata/config, readOnly: true }
            - { name: tls, mountPath: /etc/strata/tls, readOnly: true }
            - { name: data, mountPath: /var/lib/strata }
            {{- if .root }}
            - { name: api-tokens, mountPath: /etc/strata/api, readOnly: true }
            {{- end }}
            {{- if $node.joinSecret }}
            - { name: join, mountPath: /etc/strata/join, readOnly: true }
            {{- end }}
            {{- if and $etcd $node.etcd.tlsSecret }}
            - { name: etcd-tls, mountPath: /etc/strata/etcd, readOnly: true }
            {{- end }}
      volumes:
        - name: config
          configMap: { name: {{ $name }} }
        - name: tls
          secret: { secretName: {{ printf "%s%s" $top.Values.tls.secretPrefix $node.name }}, defaultMode: 288 }  # 0440
        {{- if .root }}
        - name: api-tokens
          secret: { secretName: {{ $node.apiTokensSecret }}, defaultMode: 288 }  # 0440
        {{- end }}
        {{- if $node.joinSecret }}
        - name: join
          secret: { secretName: {{ $node.joinSecret }}, defaultMode: 288 }  # 0440
        {{- end }}
        {{- if and $etcd $node.etcd.tlsSecret }}
        - name: etcd-tls
          secret: { secretName: {{ $node.etcd.tlsSecret }}, defaultMode: 288 }  # 0440
        {{- end }}
  volumeClaimTemplates:
    - apiVersion: v1
      kind: PersistentVolumeClaim
      metadata:
        name: data
      spec:
        accessModes: [ReadWriteOnce]
        {{- with $storage.storageClassName }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ $storage.size }}
{{- end }}

{{/* Whether this release's root runs several replicas on etcd. */}}
{{- define "strata.rootOnEtcd" -}}
{{- if and .Values.root.enabled (.Values.root.etcd | default dict).endpoints }}true{{ end }}
{{- end }}

{{/* The headless Service naming each replica of a root on etcd. Called with the relay's resource name. */}}
{{- define "strata.replicasService" -}}
{{ printf "%s-replicas" (. | trunc 54 | trimSuffix "-") }}
{{- end }}

{{/* Every replica's QUIC address of this release's root on etcd, comma-separated (a
child tries each at every connect: the standbys serve children too, so the list names
ready and unready pods alike, through the headless Service). */}}
{{- define "strata.rootReplicaAddresses" -}}
{{- $root := .Values.root -}}
{{- $name := printf "%s-%s" .Release.Name $root.name | trunc 63 | trimSuffix "-" -}}
{{- $headless := include "strata.replicasService" $name -}}
{{- $out := list -}}
{{- range $i := until (int ($root.etcd.replicas | default 2)) -}}
{{- $out = append $out (printf "%s-%d.%s.%s.svc:%v" $name $i $headless $.Release.Namespace $.Values.ports.quic) -}}
{{- end -}}
{{- join "," $out -}}
{{- end }}

{{/* The address a node dials to reach `parent`: the one given, or, when the parent is
this release's root on etcd, every replica's. Called with (dict "top" $ "parent" NAME "address" GIVEN "what" FIELD). */}}
{{- define "strata.parentAddress" -}}
{{- if .address -}}
{{ .address }}
{{- else if and (include "strata.rootOnEtcd" .top) (eq (toString .parent) .top.Values.root.name) -}}
{{ include "strata.rootReplicaAddresses" .top }}
{{- else -}}
{{ required .what .address }}
{{- end -}}
{{- end }}

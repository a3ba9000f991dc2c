{{/* Name of every object: the release, with the chart's name unless the release has it. */}}
{{- define "meridian.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "meridian.labels" -}}
app.kubernetes.io/name: meridian
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "meridian.extraLabels" . }}
{{- end -}}

{{/* The labels of meridian.labels beyond a component's selector (pod templates add them to it). */}}
{{- define "meridian.extraLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "store") */}}
{{- define "meridian.selector" -}}
app.kubernetes.io/name: meridian
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "meridian.image" -}}
{{- printf "%s/%s:%s" .ctx.Values.image.repository .name (.ctx.Values.image.tag | default .ctx.Chart.AppVersion) -}}
{{- end -}}

{{- define "meridian.ns" -}}{{ .Release.Namespace }}{{- end -}}

{{/* DNS suffix of the namespace's services. */}}
{{- define "meridian.svcDomain" -}}
{{- printf "%s.svc.%s" .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "meridian.storePeers" -}}{{ include "meridian.fullname" . }}-store-peers{{- end -}}
{{- define "meridian.wfPeers" -}}{{ include "meridian.fullname" . }}-watchfanout-peers{{- end -}}
{{- define "meridian.fcPeers" -}}{{ include "meridian.fullname" . }}-flowcontrol-peers{{- end -}}

{{/* Stable DNS name of store voter i: (dict "ctx" $ "i" 0) */}}
{{- define "meridian.voterHost" -}}
{{- printf "%s-store-%d.%s.%s" (include "meridian.fullname" .ctx) (int .i) (include "meridian.storePeers" .ctx) (include "meridian.svcDomain" .ctx) -}}
{{- end -}}

{{/* Every voter's gRPC address, comma-separated: what the store's clients take. */}}
{{- define "meridian.storeAddresses" -}}
{{- $addrs := list -}}
{{- range $i := until (int .Values.store.voters) -}}
{{- $addrs = append $addrs (printf "%s:2479" (include "meridian.voterHost" (dict "ctx" $ "i" $i))) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/* --initial-cluster: id=peer/client of every voter (the id is the pod's name). */}}
{{- define "meridian.initialCluster" -}}
{{- $m := list -}}
{{- range $i := until (int .Values.store.voters) -}}
{{- $h := include "meridian.voterHost" (dict "ctx" $ "i" $i) -}}
{{- $m = append $m (printf "%s-store-%d=%s:2480/%s:2479" (include "meridian.fullname" $) $i $h $h) -}}
{{- end -}}
{{- join "," $m -}}
{{- end -}}

{{/* The flowcontrol replicas the gateways list, each as its --advertise-address says; with none, the Service (no endpoints: the gateways' fallback limiters). */}}
{{- define "meridian.flowcontrolAddresses" -}}
{{- $addrs := list -}}
{{- if eq (int .Values.flowcontrol.replicas) 0 -}}
{{- $addrs = append $addrs (printf "%s-flowcontrol.%s:7003" (include "meridian.fullname" .) (include "meridian.svcDomain" .)) -}}
{{- end -}}
{{- range $i := until (int .Values.flowcontrol.replicas) -}}
{{- $addrs = append $addrs (printf "%s-flowcontrol-%d.%s.%s:7003" (include "meridian.fullname" $) $i (include "meridian.fcPeers" $) (include "meridian.svcDomain" $)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{- define "meridian.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "meridian.securityContext" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
{{- end -}}

{{/*
An init container that issues this pod's certificate with
`meridian pki issue` from the internal CA (lib/pkiplan: the subject,
organization and usages the services authorize by, which Helm's
genSignedCert cannot set). Only this init container mounts the CA's key;
the service's container gets the issued pair from the emptyDir "pki".
(dict "ctx" $ "kind" "store" "hosts" "a,b")
*/}}
{{- define "meridian.issueCert" -}}
- name: issue-certificate
  image: {{ include "meridian.image" (dict "ctx" .ctx "name" "meridian") }}
  imagePullPolicy: {{ .ctx.Values.image.pullPolicy }}
  args:
    - pki
    - issue
    - --dir=/var/run/meridian
    - --service={{ .kind }}
    {{- if .hosts }}
    - --hosts={{ .hosts }}
    {{- end }}
  env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
  securityContext:
    {{- include "meridian.securityContext" . | nindent 4 }}
  resources:
    requests: {cpu: 10m, memory: 32Mi}
    limits: {memory: 64Mi}
  volumeMounts:
    - name: pki
      mountPath: /var/run/meridian
    - name: internal-ca
      mountPath: /var/run/meridian/ca/internal
      readOnly: true
{{- end -}}

{{/* Volumes of a pod whose certificate is issued by meridian.issueCert, or by cert-manager into secret .secret. */}}
{{- define "meridian.certVolumes" -}}
{{- if .ctx.Values.certManager.enabled }}
- name: pki
  secret:
    secretName: {{ include "meridian.fullname" .ctx }}-{{ .kind }}-tls
    defaultMode: 0440
    items:
      - {key: tls.crt, path: {{ .kind }}.crt}
      - {key: tls.key, path: {{ .kind }}.key}
      - {key: ca.crt, path: internal-ca.crt}
{{- else }}
- name: pki
  emptyDir: {medium: Memory, sizeLimit: 1Mi}
- name: internal-ca
  secret:
    secretName: {{ include "meridian.fullname" .ctx }}-internal-ca
    defaultMode: 0440
    items:
      - {key: tls.crt, path: ca.crt}
      - {key: tls.key, path: ca.key}
{{- end }}
{{- end -}}

{{/*
The service container's view of its certificate: /var/run/meridian/pki
(<kind>.crt, <kind>.key, internal-ca.crt). Mounted there, not above it,
so that other volumes can be mounted beside it under /var/run/meridian
(a mount point cannot be made inside a read-only volume).
*/}}
{{- define "meridian.certMount" -}}
- name: pki
  mountPath: /var/run/meridian/pki
  readOnly: true
  {{- if not .Values.certManager.enabled }}
  subPath: pki
  {{- end }}
{{- end -}}

{{/* Spread of a component's replicas over nodes and zones: (dict "ctx" $ "component" "x") */}}
{{- define "meridian.spread" -}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "meridian.selector" . | nindent 14 }}
  {{- with .site }}{{ with include "meridian.siteAffinity" . }}
  {{- . | nindent 2 }}
  {{- end }}{{ end }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "meridian.selector" . | nindent 8 }}
{{- end -}}

{{/* 90 % of a memory quantity (Ki, Mi, Gi), in Mi, for --memory-limit. */}}
{{- define "meridian.memoryLimit" -}}
{{- $q := toString . -}}
{{- $mi := 0 -}}
{{- if hasSuffix "Gi" $q -}}{{- $mi = mul (trimSuffix "Gi" $q | int) 1024 -}}
{{- else if hasSuffix "Mi" $q -}}{{- $mi = trimSuffix "Mi" $q | int -}}
{{- else -}}{{- fail (printf "memory limit %q: give it in Mi or Gi" $q) -}}
{{- end -}}
{{- printf "%dMi" (div (mul $mi 9) 10) -}}
{{- end -}}

{{/*
The sites the gateway and watchfanout workloads are rendered for: each
entry of .Values.regions, or one unnamed site when there are none (the
single cluster-wide Deployment and StatefulSet, named as before regions
existed). Returned as JSON: a list of regions with "name" "" for the
unnamed site.
*/}}
{{- define "meridian.sites" -}}
{{- if .Values.regions -}}{{- toJson .Values.regions -}}{{- else -}}{{- toJson (list (dict "name" "")) -}}{{- end -}}
{{- end -}}

{{/* A site's workload name suffix: "-<region>", or "" for the unnamed site. */}}
{{- define "meridian.siteSuffix" -}}
{{- if .name }}-{{ .name }}{{ end -}}
{{- end -}}

{{/* The labels that set a region's pods apart (selector and template); nothing for the unnamed site. */}}
{{- define "meridian.siteLabels" -}}
{{- if .name }}meridian.io/region: {{ .name }}{{ end -}}
{{- end -}}

{{/*
A region's node affinity: required, the region's node label
(.nodeLabel, default topology.kubernetes.io/region) equal to .nodeLabelValue.
*/}}
{{- define "meridian.siteAffinity" -}}
{{- if .name -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - key: {{ .nodeLabel | default "topology.kubernetes.io/region" }}
            operator: In
            values: [{{ .nodeLabelValue | quote }}]
{{- end -}}
{{- end -}}

{{/*
--store-local-address of a region's gateways and watchfanout replicas: the
gRPC addresses of the store members in the region, the pods of its
.storeGroups ("voters": the voter StatefulSet; otherwise a
store.nonVoters name) and its .storeMembers (pod names). Empty for the
unnamed site and a region without members.
*/}}
{{- define "meridian.siteStoreLocal" -}}
{{- $ctx := .ctx -}}
{{- $fullname := include "meridian.fullname" $ctx -}}
{{- $domain := printf "%s.%s" (include "meridian.storePeers" $ctx) (include "meridian.svcDomain" $ctx) -}}
{{- $addrs := list -}}
{{- range $g := (.site.storeGroups | default list) -}}
{{- if eq $g "voters" -}}
{{- range $i := until (int $ctx.Values.store.voters) -}}
{{- $addrs = append $addrs (printf "%s-store-%d.%s:2479" $fullname $i $domain) -}}
{{- end -}}
{{- else -}}
{{- $found := false -}}
{{- range $ctx.Values.store.nonVoters -}}
{{- if eq .name $g -}}
{{- $found = true -}}
{{- range $i := until (int .replicas) -}}
{{- $addrs = append $addrs (printf "%s-store-%s-%d.%s:2479" $fullname $g $i $domain) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "regions: region %q names store group %q, which is neither \"voters\" nor a store.nonVoters name" $.site.name $g) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range (.site.storeMembers | default list) -}}
{{- $addrs = append $addrs (printf "%s.%s:2479" . $domain) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/* A site's watchfanout values: watchfanout's, with the region's watchfanout overrides. */}}
{{- define "meridian.siteWatchfanout" -}}
{{- toJson (mergeOverwrite (deepCopy .ctx.Values.watchfanout) (deepCopy (.site.watchfanout | default dict))) -}}
{{- end -}}

{{/* A site's apigateway values: apigateway's, with the region's apigateway overrides. */}}
{{- define "meridian.siteApigateway" -}}
{{- toJson (mergeOverwrite (deepCopy .ctx.Values.apigateway) (deepCopy (.site.apigateway | default dict))) -}}
{{- end -}}

{{/* The watchfanout replica names a site's gateways list: the site's StatefulSet's, up to its maxReplicas. */}}
{{- define "meridian.siteWatchfanoutAddresses" -}}
{{- $v := include "meridian.siteWatchfanout" . | fromJson -}}
{{- $n := int $v.replicas -}}
{{- if $v.autoscaling.enabled -}}{{- $n = int $v.autoscaling.maxReplicas -}}{{- end -}}
{{- $addrs := list -}}
{{- range $i := until $n -}}
{{- $addrs = append $addrs (printf "%s-watchfanout%s-%d.%s.%s:7004" (include "meridian.fullname" $.ctx) (include "meridian.siteSuffix" $.site) $i (include "meridian.wfPeers" $.ctx) (include "meridian.svcDomain" $.ctx)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

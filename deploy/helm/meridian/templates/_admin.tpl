{{- /*
meridian.adminSecrets (dict "ctx" $ "caData" <API CA, base64>): the admin's credentials: a bearer token the gateways accept
(--token-auth-file, user admin in system:masters), kept across upgrades,
and a kubeconfig with it in the Secret <release>-admin-kubeconfig (key
"kubeconfig"). With cert-manager the API CA exists only once cert-manager
made it: the kubeconfig then carries it from the second render on (helm
upgrade), and until then the CA is in the Secret <release>-apiserver-tls
(ca.crt).
*/ -}}
{{- define "meridian.adminSecrets" -}}
{{- $caData := .caData }}
{{- with .ctx }}
{{- $fullname := include "meridian.fullname" . }}
{{- $token := "" }}
{{- $old := lookup "v1" "Secret" .Release.Namespace (printf "%s-tokens" $fullname) }}
{{- if and $old (index $old.data "admin-token") }}
{{- $token = index $old.data "admin-token" | b64dec }}
{{- else }}
{{- $token = randAlphaNum 48 }}
{{- end }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ $fullname }}-tokens
  labels: {{- include "meridian.labels" . | nindent 4 }}
type: Opaque
data:
  admin-token: {{ $token | b64enc }}
  {{- if .Values.admin.enabled }}
  tokens.csv: {{ printf "%s,admin,admin,\"system:masters\"\n" $token | b64enc }}
  {{- else }}
  tokens.csv: ""
  {{- end }}
{{- if .Values.admin.enabled }}
{{- $server := .Values.apigateway.externalURL | default (printf "https://%s-apigateway.%s.svc:%d" $fullname .Release.Namespace (int .Values.apigateway.service.port)) }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ $fullname }}-admin-kubeconfig
  labels: {{- include "meridian.labels" . | nindent 4 }}
type: Opaque
stringData:
  kubeconfig: |
    apiVersion: v1
    kind: Config
    clusters:
      - name: meridian
        cluster:
          server: {{ $server }}
          {{- if $caData }}
          certificate-authority-data: {{ $caData }}
          {{- end }}
    users:
      - name: admin
        user:
          token: {{ $token }}
    contexts:
      - name: meridian
        context: {cluster: meridian, user: admin}
    current-context: meridian
{{- end }}
{{- end }}
{{- end -}}

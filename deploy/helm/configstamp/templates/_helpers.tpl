{{- define "configstamp.name" -}}configstamp{{- end }}
{{- define "configstamp.labels" -}}
app.kubernetes.io/name: configstamp
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}
{{- define "configstamp.selector" -}}
app.kubernetes.io/name: configstamp
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "configstamp.certSecret" -}}configstamp-webhook-tls{{- end }}
{{- define "configstamp.validate" -}}
{{- if not (has .Values.certificates.mode (list "cert-manager" "self-signed")) }}
{{- fail (printf "certificates.mode %q is not supported: use cert-manager or self-signed" .Values.certificates.mode) }}
{{- end }}
{{- if not (has .Values.webhook.failurePolicy (list "Ignore" "Fail")) }}
{{- fail "webhook.failurePolicy must be Ignore or Fail" }}
{{- end }}
{{- end }}

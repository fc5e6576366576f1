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
{{- /* Namespaces never acted in: the registration's namespaceSelector and the watcher's
--exclude-namespaces, from this one list (sorted, unique, as configstamp normalizes it). */ -}}
{{- define "configstamp.excludedNamespaces" -}}
{{- append .Values.excludeNamespaces .Release.Namespace | uniq | sortAlpha | toJson }}
{{- end }}
{{- define "configstamp.readTimeout" -}}{{ mul .Values.webhook.timeoutSeconds 600 }}ms{{- end }}
{{- /* The serving certificate's Secret, one name per mode: self-signed mode's is Opaque and
kept on uninstall (configstamp's CA), cert-manager's is kubernetes.io/tls; a Secret's type
cannot change, so with one name a switch of modes could not create the other. */ -}}
{{- define "configstamp.certSecret" -}}
{{- if eq .Values.certificates.mode "self-signed" }}configstamp-webhook-tls{{ else }}configstamp-cert-manager-tls{{ end }}
{{- end }}
{{- /* The HMAC key of Secret digests (--secret-hash-key): configstamp creates it. */ -}}
{{- define "configstamp.hashKeySecret" -}}configstamp-hash-key{{- end }}
{{- define "configstamp.validate" -}}
{{- if not (has .Values.certificates.mode (list "cert-manager" "self-signed")) }}
{{- fail (printf "certificates.mode %q is not supported: use cert-manager or self-signed" .Values.certificates.mode) }}
{{- end }}
{{- if or (lt (int .Values.webhook.timeoutSeconds) 1) (gt (int .Values.webhook.timeoutSeconds) 30) }}
{{- fail "webhook.timeoutSeconds must be between 1 and 30" }}
{{- end }}
{{- if not (has .Values.webhook.failurePolicy (list "Ignore" "Fail")) }}
{{- fail "webhook.failurePolicy must be Ignore or Fail" }}
{{- end }}
{{- range $name, $v := dict "secrets.enabled" .Values.secrets.enabled "argoRollouts.enabled" .Values.argoRollouts.enabled }}
{{- if not (kindIs "bool" $v) }}
{{- fail (printf "%s must be true or false" $name) }}
{{- end }}
{{- end }}
{{- end }}

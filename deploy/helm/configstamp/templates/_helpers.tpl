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
{{- /* repository@digest when image.digest is set (the tag is then ignored), else
repository:tag, the tag defaulting to the chart's appVersion. */ -}}
{{- define "configstamp.image" -}}
{{- if .Values.image.digest }}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else }}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
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
{{- /* values.schema.json checks each value (types, enums, ranges, patterns); here what
it cannot: values against each other. */ -}}
{{- define "configstamp.validate" -}}
{{- $delay := include "configstamp.seconds" .Values.shutdownDelay | float64 }}
{{- if lt (float64 .Values.terminationGracePeriodSeconds) (addf $delay 10) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be at least shutdownDelay (%s) plus the 10 s configstamp's graceful shutdown may take: set it to %v or more" .Values.terminationGracePeriodSeconds .Values.shutdownDelay (ceil (addf $delay 10))) }}
{{- end }}
{{- $ports := list (int .Values.webhook.port) (int .Values.metrics.port) (int .Values.probes.port) }}
{{- if ne (len (uniq $ports)) 3 }}
{{- fail (printf "webhook.port (%v), metrics.port (%v) and probes.port (%v) must differ" .Values.webhook.port .Values.metrics.port .Values.probes.port) }}
{{- end }}
{{- end }}
{{- /* The seconds in a Go duration (values.schema.json has checked its form), e.g. 1m30s: 90. */ -}}
{{- define "configstamp.seconds" -}}
{{- $unit := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9.]+(ns|us|µs|ms|s|m|h)" (toString .) -1 }}
{{- $n := regexFind "^[0-9.]+" . }}
{{- $total = addf $total (mulf (float64 $n) (get $unit (trimPrefix $n .))) }}
{{- end }}
{{- $total }}
{{- end }}

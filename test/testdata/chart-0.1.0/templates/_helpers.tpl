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
{{- /* The watcher's pods (roles.split): another name, so that neither the Service nor the
webhook Deployment's selector (configstamp.selector) takes them in. */ -}}
{{- define "configstamp.watcherSelector" -}}
app.kubernetes.io/name: configstamp-watcher
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "configstamp.watcherLabels" -}}
{{- include "configstamp.labels" . | replace "app.kubernetes.io/name: configstamp\n" "app.kubernetes.io/name: configstamp-watcher\n" }}
{{- end }}
{{- /* Every pod of the release, either role's: for the NetworkPolicy. */ -}}
{{- define "configstamp.anyRoleSelector" -}}
matchLabels:
  app.kubernetes.io/instance: {{ .Release.Name }}
matchExpressions:
- {key: app.kubernetes.io/name, operator: In, values: [configstamp, configstamp-watcher]}
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
{{- else }}{{ .Values.image.repository }}:{{ include "configstamp.string" .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}
{{- define "configstamp.readTimeout" -}}{{ mul .Values.webhook.timeoutSeconds 600 }}ms{{- end }}
{{- /* The serving certificate's Secret, one name per mode: self-signed mode's is Opaque and
kept on uninstall (configstamp's CA), cert-manager's is kubernetes.io/tls; a Secret's type
cannot change, so with one name a switch of modes could not create the other. */ -}}
{{- define "configstamp.certSecret" -}}
{{- if eq .Values.certificates.mode "self-signed" }}configstamp-webhook-tls{{ else }}configstamp-cert-manager-tls{{ end }}
{{- end }}
{{- /* The HMAC key of every digest (--hash-key): the chart creates it empty, configstamp fills it. */ -}}
{{- define "configstamp.hashKeySecret" -}}configstamp-hash-key{{- end }}
{{- /* values.schema.json checks each value (types, enums, ranges, patterns); here what
it cannot: values against each other. */ -}}
{{- define "configstamp.validate" -}}
{{- /* After SIGTERM: shutdownDelay serving, then up to 10 s of graceful shutdown, and 5 s
of margin before the kubelet kills the process mid-shutdown. */}}
{{- $delay := include "configstamp.seconds" .Values.shutdownDelay | float64 }}
{{- if lt (float64 .Values.terminationGracePeriodSeconds) (addf $delay 15) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be at least shutdownDelay (%v) plus the 10 s configstamp's graceful shutdown may take plus 5 s of margin: set it to %v or more" .Values.terminationGracePeriodSeconds .Values.shutdownDelay (ceil (addf $delay 15))) }}
{{- end }}
{{- /* roles.split without leader election: every watcher replica would run the watcher
(each nudging, checking every workload, writing the coverage record), not a leader and a
standby. */}}
{{- if and .Values.roles.split (not .Values.leaderElection.enabled) (gt (int .Values.watcher.replicas) 1) }}
{{- fail (printf "leaderElection.enabled=false with roles.split: each of the %v watcher replicas would run the watcher; set watcher.replicas=1 (the webhook's replicas need no leader election)" .Values.watcher.replicas) }}
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
{{- /* A scalar value as text: a whole number read from a values file (which helm reads
as a float, 20240101 printing as 2.0240101e+07) without a fraction; a string, an integer
(helm --set 2) or a boolean (helm --set true) as it is. */ -}}
{{- define "configstamp.string" -}}
{{- if kindIs "float64" . }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- end }}
{{- /* A map of labels, annotations or node labels as YAML, every value a string (the API
takes only strings there; values.schema.json lets integers and booleans through). */ -}}
{{- define "configstamp.stringMap" -}}
{{- $out := dict }}
{{- range $k, $v := . }}{{ $_ := set $out $k (include "configstamp.string" $v) }}{{ end }}
{{- toYaml $out }}
{{- end }}
{{- /* The value the watcher runs with for a flag that extraArgs or watcher.extraArgs may
set: (list "name" default), e.g. (list "leader-election-id" "configstamp-watcher"). Go's
flag package takes -name=value, --name=value, and -name value or --name value (the value
the next argument); the last one wins. */ -}}
{{- define "configstamp.flag" -}}
{{- $name := index .args 0 }}
{{- $value := index .args 1 }}
{{- $next := false }}
{{- range concat .Values.extraArgs .Values.watcher.extraArgs }}
{{- $arg := include "configstamp.string" . }}
{{- if $next }}{{ $value = $arg }}{{ end }}
{{- $next = or (eq $arg (printf "-%s" $name)) (eq $arg (printf "--%s" $name)) }}
{{- if or (hasPrefix (printf "-%s=" $name) $arg) (hasPrefix (printf "--%s=" $name) $arg) }}
{{- $value = regexReplaceAll "^--?[^=]*=" $arg "" }}
{{- end }}
{{- end }}
{{- $value }}
{{- end }}
{{- /* The leader-election Lease (--leader-election-id): the Role grants get and update of
this name only. */ -}}
{{- define "configstamp.leaseName" -}}
{{- include "configstamp.flag" (dict "Values" .Values "args" (list "leader-election-id" "configstamp-watcher")) }}
{{- end }}
{{- /* A namespaced install (watchNamespaces): the namespaces acted in, less the excluded
ones (which win), sorted and unique, as configstamp normalizes --watch-namespaces; its
coverage ConfigMap; and the checks of its values against the others. */ -}}
{{- define "configstamp.watchedNamespaces" -}}
{{- $excluded := include "configstamp.excludedNamespaces" . | fromJsonArray }}
{{- $out := list }}
{{- range .Values.watchNamespaces }}{{ if not (has . $excluded) }}{{ $out = append $out . }}{{ end }}{{ end }}
{{- $out | uniq | sortAlpha | toJson }}
{{- end }}
{{- define "configstamp.coverageConfigMap" -}}configstamp-coverage{{- end }}
{{- define "configstamp.validateNamespaced" -}}
{{- if .Values.watchNamespaces }}
{{- if not (include "configstamp.watchedNamespaces" . | fromJsonArray) }}
{{- fail (printf "watchNamespaces %v: every one is excluded (excludeNamespaces and the release's own namespace)" .Values.watchNamespaces) }}
{{- end }}
{{- if ne .Values.certificates.mode "cert-manager" }}
{{- fail "watchNamespaces needs certificates.mode cert-manager: a namespaced install may not write its registration's caBundle (self-signed mode does); cert-manager's CA injector keeps it" }}
{{- end }}
{{- end }}
{{- end }}
{{- /* metrics.secure, but never in a namespaced install: authenticating scrapes takes
cluster-wide grants (TokenReview, SubjectAccessReview), which it has none of. */ -}}
{{- define "configstamp.metricsSecure" -}}
{{- and .Values.metrics.secure (not .Values.watchNamespaces) }}
{{- end }}
{{- /* Non-empty when the ValidatingAdmissionPolicy restricting configstamp's own
ServiceAccount renders: selfPolicy.enabled, and an API server that serves
admissionregistration.k8s.io/v1 policies (Kubernetes 1.30 and later). */ -}}
{{- define "configstamp.selfPolicy" -}}
{{- if and .Values.selfPolicy.enabled (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") }}true{{ end }}
{{- end }}
{{- /* The match condition of a kind's registration entries, the same expression as
webhook.MatchConditions (test/deploy compares them): configstamp is called for a CREATE,
and for an UPDATE that carries the watcher's marker (configstamp.io/nudge, even left in
place by an outage), changes the pod template (at .path, e.g. spec.template), one of the
workload annotations configstamp reads or writes (looked up by key: the cost stays flat)
or the opt-in label (.label), or resumes a paused workload (.paused, e.g. spec.paused;
empty for kinds that cannot be paused); other UPDATEs (labels, replicas) cost no call.
Arguments: dict "path" "label" "paused". */ -}}
{{- define "configstamp.present" -}}
{{- $prefix := .root -}}{{- $has := list -}}
{{- range splitList "." .path -}}
{{- $prefix = printf "%s.%s" $prefix . -}}{{- $has = append $has (printf "has(%s)" $prefix) -}}
{{- end -}}
({{ join " && " $has }})
{{- end -}}
{{- define "configstamp.keyChanged" -}}
{{- $n := printf "(has(object.%[1]s) && '%[2]s' in object.%[1]s)" .field .key -}}
{{- $o := printf "(has(oldObject.%[1]s) && '%[2]s' in oldObject.%[1]s)" .field .key -}}
{{- printf "%[1]s != %[2]s || (%[1]s && %[2]s && object.%[3]s['%[4]s'] != oldObject.%[3]s['%[4]s'])" $n $o .field .key -}}
{{- end -}}
{{- define "configstamp.matchExpression" -}}
{{- $new := include "configstamp.present" (dict "root" "object" "path" .path) -}}
{{- $old := include "configstamp.present" (dict "root" "oldObject" "path" .path) -}}
{{- $parts := list
  "request.operation != 'UPDATE'"
  "(has(object.metadata.annotations) && 'configstamp.io/nudge' in object.metadata.annotations)"
  (printf "%s != %s || (%s && object.%s != oldObject.%s)" $new $old $new .path .path) -}}
{{- range list "configstamp.io/nudge" "configstamp.io/observed" "configstamp.io/skip" "configstamp.io/extra-sources" -}}
{{- $parts = append $parts (include "configstamp.keyChanged" (dict "field" "metadata.annotations" "key" .)) -}}
{{- end -}}
{{- $parts = append $parts (include "configstamp.keyChanged" (dict "field" "metadata.labels" "key" .label)) -}}
{{- if .paused -}}
{{- $pOld := include "configstamp.present" (dict "root" "oldObject" "path" .paused) -}}
{{- $pNew := include "configstamp.present" (dict "root" "object" "path" .paused) -}}
{{- $parts = append $parts (printf "(%s && oldObject.%s == true) && !(%s && object.%s == true)" $pOld .paused $pNew .paused) -}}
{{- end -}}
{{- join " || " $parts -}}
{{- end }}
{{- /* The ServiceAccounts: configstamp runs the watcher (and, with roles.split false, both
roles: the account of charts before the split, so the workloads' writer keeps its name);
configstamp-webhook the webhook role (roles.split), which holds no write to any workload.
The webhook's is rendered in both layouts, so that switching roles.split either way never
takes the identity from pods still running under it. */ -}}
{{- define "configstamp.serviceAccount" -}}configstamp{{- end }}
{{- define "configstamp.webhookServiceAccount" -}}configstamp-webhook{{- end }}
{{- /* The user names of configstamp's ServiceAccounts (a JSON list): what is keyed on
configstamp's identity (the self policies) matches both. */ -}}
{{- define "configstamp.users" -}}
{{- list (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "configstamp.serviceAccount" .)) (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "configstamp.webhookServiceAccount" .)) | toJson }}
{{- end }}
{{- /* The ServiceAccounts configstamp's processes run as, in the release namespace (a JSON
list), the watcher's and the webhook's: the FlowSchema matches these. */ -}}
{{- define "configstamp.serviceAccountNames" -}}
{{- list (include "configstamp.serviceAccount" .) (include "configstamp.webhookServiceAccount" .) | toJson }}
{{- end }}
{{- /* Non-empty when the API Priority and Fairness objects render: flowControl.enabled,
and an API server that serves flowcontrol.apiserver.k8s.io/v1 (Kubernetes 1.29 and later). */ -}}
{{- define "configstamp.flowControl" -}}
{{- if and .Values.flowControl.enabled (.Capabilities.APIVersions.Has "flowcontrol.apiserver.k8s.io/v1") }}true{{ end }}
{{- end }}

{{- /* Every value's default, as values.yaml has it (TestRenderDefaultsMatchValues compares
the two): helm upgrade --reuse-values renders with the values of the release it upgrades,
the earlier chart's defaults included, so a value this chart added is missing there; and a
value set to null is missing too (helm deletes it). "configstamp.defaults" gives each
missing value its default, so a missing or null value means the default. Plain YAML, no
template actions. */ -}}
{{- define "configstamp.defaultValues" -}}
image: {repository: ghcr.io/configstamp/configstamp, tag: "", digest: "", pullPolicy: IfNotPresent}
imagePullSecrets: []
extraArgs: []
replicas: 2
roles: {split: true}
watcher: {replicas: 2, resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {memory: 256Mi}}, extraArgs: []}
leaderElection: {enabled: true}
namespaceLabel: configstamp.io/inject
excludeNamespaces: [kube-system]
watchNamespaces: []
secrets: {enabled: false}
csiSecrets: {enabled: false}
notifications: {urlSecret: {name: "", key: url}, format: cloudevents, source: configstamp, batchWindow: 5s}
argoRollouts: {enabled: false}
fluxHelmReleases: {enabled: false}
debounce: 2s
debounceMax: 30s
minRolloutInterval: 10s
waves: {enabled: false, steps: "1,10%,50%", threshold: 5, deadline: 10m}
recheckInterval: 10m
concurrency: 4
rollStaleAtInstall: false
webhook: {port: 9443, timeoutSeconds: 5, failurePolicy: Ignore, clientCA: {secretName: "", key: ca.crt}}
certificates: {mode: cert-manager, duration: 2160h, renewBefore: 720h, caDuration: 43800h, caSwitchDelay: 1m}
resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {memory: 256Mi}}
priorityClassName: ""
podDisruptionBudget: {enabled: true, minAvailable: 1}
selfPolicy: {enabled: true}
flowControl: {enabled: true, matchingPrecedence: 1000, nominalConcurrencyShares: 10, lendablePercent: 50, borrowingLimitPercent: 100, queuing: {queues: 16, handSize: 4, queueLengthLimit: 50}}
networkPolicy: {enabled: true, apiServer: {cidrs: [], from: [], allowAll: true}, metricsFrom: []}
metrics: {port: 8080, secure: true}
probes: {port: 8081}
serviceMonitor: {enabled: false, interval: 30s, labels: {}}
prometheusRule: {enabled: false, labels: {}, alertLabels: {}, selector: ""}
grafanaDashboard: {enabled: false, labels: {grafana_dashboard: "1"}, annotations: {}, namespace: ""}
logging: {level: info, format: json}
kubeAPI: {qps: 20, burst: 30}
shutdownDelay: 10s
terminationGracePeriodSeconds: 30
hostNetwork: false
podSecurityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
nodeSelector: {}
tolerations: []
affinity: {}
topologySpreadConstraints: []
podAnnotations: {}
podLabels: {}
{{- end }}
{{- /* Fills in .Values, in place, every value that is missing or null: a top-level value
whole; within an object the chart defines (metrics, certificates, ...), each of its keys.
Not within the free-form objects whose default is not empty (resources and the security
contexts): a key removed there with null stays removed. Every template includes this
first; it prints nothing and may run any number of times. */ -}}
{{- define "configstamp.defaults" -}}
{{- $freeForm := list "resources" "podSecurityContext" "securityContext" }}
{{- range $key, $default := include "configstamp.defaultValues" . | fromYaml }}
{{- $value := index $.Values $key }}
{{- if kindIs "invalid" $value }}
{{- $_ := set $.Values $key $default }}
{{- else if and (kindIs "map" $default) (kindIs "map" $value) (not (has $key $freeForm)) }}
{{- range $k, $d := $default }}
{{- if kindIs "invalid" (index $value $k) }}
{{- $_ := set $value $k $d }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

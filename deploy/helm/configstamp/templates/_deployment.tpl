{{- /* One Deployment of configstamp in a role (.role: webhook, watcher or all), with the
root context's Values, Release, Chart, Capabilities. roles.split renders the webhook as the
Deployment configstamp (the Service selects its pods; its selector is the one the
single-Deployment layout had, which cannot change) and the watcher as configstamp-watcher,
whose pods carry another app.kubernetes.io/name so that neither the Service nor the
webhook's selector takes them in. */ -}}
{{- define "configstamp.deployment" -}}
{{- $name := "configstamp" }}
{{- $replicas := .Values.replicas }}
{{- $resources := .Values.resources }}
{{- $selector := include "configstamp.selector" . }}
{{- $podLabels := include "configstamp.labels" . }}
{{- if eq .role "watcher" }}
{{- $name = "configstamp-watcher" }}
{{- $replicas = .Values.watcher.replicas }}
{{- $resources = .Values.watcher.resources }}
{{- $selector = include "configstamp.watcherSelector" . }}
{{- $podLabels = include "configstamp.watcherLabels" . }}
{{- end }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels: {{- include "configstamp.labels" . | nindent 4 }}
spec:
  replicas: {{ $replicas }}
  {{- if and .Values.hostNetwork (ne .role "watcher") }}
  # hostNetwork: each pod holds its ports on its node, so a new pod can start only on a
  # node without one; the default surge (a new pod before an old one stops) would wait
  # forever when every eligible node runs one already. One old pod stops first instead.
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 0, maxUnavailable: 1}
  {{- end }}
  selector:
    matchLabels: {{- $selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- $podLabels | nindent 8 }}
        {{- /* podLabels never replace the chart's labels (the selector needs them). */}}
        {{- $own := $podLabels | fromYaml }}
        {{- range $k, $v := .Values.podLabels }}
        {{- if not (hasKey $own $k) }}
        {{ $k }}: {{ include "configstamp.string" $v | quote }}
        {{- end }}
        {{- end }}
      {{- with .Values.podAnnotations }}
      annotations: {{- include "configstamp.stringMap" . | nindent 8 }}
      {{- end }}
    spec:
      {{- if eq .role "webhook" }}
      # The webhook's own ServiceAccount: no write to any workload (rbac-webhook.yaml).
      serviceAccountName: {{ include "configstamp.webhookServiceAccount" . }}
      {{- else }}
      serviceAccountName: {{ include "configstamp.serviceAccount" . }}
      {{- end }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- if and .Values.hostNetwork (ne .role "watcher") }}
      # The API server calls the webhook on the node's address (webhook.port on the node).
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      {{- end }}
      {{- with .Values.podSecurityContext }}
      securityContext: {{- toYaml . | nindent 8 }}
      {{- end }}
      # Room for --shutdown-delay and the graceful shutdown after it.
      terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
      affinity:
      {{- if .Values.affinity }}
        {{- toYaml .Values.affinity | nindent 8 }}
      {{- else }}
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels: {{- $selector | nindent 18 }}
      {{- end }}
      {{- with .Values.topologySpreadConstraints }}
      topologySpreadConstraints:
      {{- range . }}
      {{- $c := deepCopy . }}
      {{- /* A constraint without a labelSelector counts configstamp's own pods. */}}
      {{- if not (hasKey $c "labelSelector") }}
      {{- $_ := set $c "labelSelector" (dict "matchLabels" ($selector | fromYaml)) }}
      {{- end }}
      {{- toYaml (list $c) | nindent 6 }}
      {{- end }}
      {{- end }}
      {{- with .Values.nodeSelector }}
      nodeSelector: {{- include "configstamp.stringMap" . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations: {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
      - name: configstamp
        image: {{ include "configstamp.image" . | quote }}
        imagePullPolicy: {{ .Values.image.pullPolicy }}
        {{- $notify := and .Values.notifications.urlSecret.name (ne .role "webhook") }}
        args:
        {{- if ne .role "all" }}
        - --role={{ .role }}
        {{- end }}
        {{- if ne .role "webhook" }}
        - --leader-elect={{ .Values.leaderElection.enabled }}
        {{- end }}
        {{- if ne .role "watcher" }}
        - --webhook-port={{ .Values.webhook.port }}
        - --webhook-cert-dir=/certs
        {{- end }}
        - --metrics-bind-address=:{{ .Values.metrics.port }}
        - --metrics-secure={{ include "configstamp.metricsSecure" . }}
        - --health-probe-bind-address=:{{ .Values.probes.port }}
        - --namespace-label={{ .Values.namespaceLabel }}
        - --exclude-namespaces={{ include "configstamp.excludedNamespaces" . | fromJsonArray | join "," }}
        - --read-timeout={{ include "configstamp.readTimeout" . }}
        - --min-rollout-interval={{ .Values.minRolloutInterval }}
        {{- if .Values.waves.enabled }}
        - --waves={{ .Values.waves.steps }}
        {{- end }}
        - --waves-threshold={{ .Values.waves.threshold }}
        - --waves-deadline={{ .Values.waves.deadline }}
        - --recheck-interval={{ .Values.recheckInterval }}
        - --concurrency={{ .Values.concurrency }}
        - --roll-stale-at-install={{ .Values.rollStaleAtInstall }}
        - --secrets={{ .Values.secrets.enabled }}
        - --hash-key={{ .Release.Namespace }}/{{ include "configstamp.hashKeySecret" . }}
        - --argo-rollouts={{ .Values.argoRollouts.enabled }}
        - --csi-secrets={{ .Values.csiSecrets.enabled }}
        {{- if and .Values.fluxHelmReleases.enabled (ne .role "webhook") }}
        - --flux-helmreleases=true
        {{- end }}
        - --debounce={{ .Values.debounce }}
        - --debounce-max={{ .Values.debounceMax }}
        - --kube-api-qps={{ .Values.kubeAPI.qps }}
        - --kube-api-burst={{ .Values.kubeAPI.burst }}
        - --zap-log-level={{ .Values.logging.level }}
        - --zap-encoder={{ .Values.logging.format }}
        {{- if ne .role "watcher" }}
        - --shutdown-delay={{ .Values.shutdownDelay }}
        {{- end }}
        {{- if eq .role "webhook" }}
        # The watcher runs as another ServiceAccount: its nudges and records count too.
        - --watcher-user=system:serviceaccount:{{ .Release.Namespace }}:{{ include "configstamp.serviceAccount" . }}
        {{- end }}
        {{- if .Values.watchNamespaces }}
        - --watch-namespaces={{ include "configstamp.watchedNamespaces" . | fromJsonArray | join "," }}
        - --coverage-configmap={{ .Release.Namespace }}/{{ include "configstamp.coverageConfigMap" . }}
        {{- else if eq .role "watcher" }}
        {{- /* The certificates and the caBundle are the webhook role's. */}}
        {{- else if eq .Values.certificates.mode "self-signed" }}
        - --self-signed-secret={{ .Release.Namespace }}/{{ include "configstamp.certSecret" . }}
        - --self-signed-hosts=configstamp.{{ .Release.Namespace }}.svc,configstamp.{{ .Release.Namespace }}.svc.cluster.local
        - --self-signed-validity={{ .Values.certificates.duration }}
        - --self-signed-renew-before={{ .Values.certificates.renewBefore }}
        - --self-signed-ca-validity={{ .Values.certificates.caDuration }}
        {{- else }}
        - --tls-secret={{ .Release.Namespace }}/{{ include "configstamp.certSecret" . }}
        {{- end }}
        {{- if ne .role "watcher" }}
        - --ca-switch-delay={{ .Values.certificates.caSwitchDelay }}
        {{- end }}
        {{- if and .Values.webhook.clientCA.secretName (ne .role "watcher") }}
        - --webhook-client-ca-file=/webhook-client-ca/{{ .Values.webhook.clientCA.key }}
        {{- end }}
        {{- if $notify }}
        - --notify-url-file=/notify/{{ .Values.notifications.urlSecret.key }}
        - --notify-format={{ .Values.notifications.format }}
        - --notify-source={{ .Values.notifications.source }}
        - --notify-batch-window={{ .Values.notifications.batchWindow }}
        {{- end }}
        {{- range .Values.extraArgs }}
        - {{ include "configstamp.string" . | quote }}
        {{- end }}
        {{- if ne .role "webhook" }}
        {{- range .Values.watcher.extraArgs }}
        - {{ include "configstamp.string" . | quote }}
        {{- end }}
        {{- end }}
        env:
        # configstamp sets the Go memory limit to 80% of the container's (unless GOMEMLIMIT
        # is set), so the collector works harder before the kernel kills it.
        - name: CONFIGSTAMP_MEMORY_LIMIT
          valueFrom:
            resourceFieldRef: {resource: limits.memory}
        ports:
        {{- if ne .role "watcher" }}
        - {name: webhook, containerPort: {{ .Values.webhook.port }}}
        {{- end }}
        - {name: metrics, containerPort: {{ .Values.metrics.port }}}
        - {name: probes, containerPort: {{ .Values.probes.port }}}
        readinessProbe:
          httpGet: {path: /readyz, port: probes}
          periodSeconds: 5
        livenessProbe:
          httpGet: {path: /healthz, port: probes}
          periodSeconds: 10
        # Until the first serving certificate is in place (cert-manager issuing it, a new
        # CA API servers must trust first) nothing listens: up to 5 minutes before the
        # liveness probe counts.
        startupProbe:
          httpGet: {path: /healthz, port: probes}
          periodSeconds: 5
          failureThreshold: 60
        resources: {{- toYaml $resources | nindent 10 }}
        {{- with .Values.securityContext }}
        securityContext: {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- if or (ne .role "watcher") $notify }}
        volumeMounts:
        {{- end }}
        {{- if ne .role "watcher" }}
        # Both modes: a writable directory, in memory, that configstamp fills through the
        # API from the certificate Secret (cert-manager's, which it follows; or its own,
        # which it keeps), after the registration's caBundle trusts the CA that signed it;
        # the cert watcher reloads what it writes. Not the Secret as a volume: the kubelet
        # refreshes that up to a minute late and on its own schedule, so a certificate
        # from a new CA could be served before API servers trust that CA.
        # A namespaced install mounts cert-manager's Secret instead (it may not keep the
        # registration's caBundle; cert-manager's CA injector does).
        - name: certs
          mountPath: /certs
          {{- if .Values.watchNamespaces }}
          readOnly: true
          {{- end }}
        {{- if .Values.webhook.clientCA.secretName }}
        # webhook.clientCA: the CA of the API server's client certificate (watched: no
        # subPath, so the kubelet's updates of the Secret reach the file).
        - name: webhook-client-ca
          mountPath: /webhook-client-ca
          readOnly: true
        {{- end }}
      {{- end }}
        {{- if $notify }}
        # notifications.urlSecret: the receiver's URL (a secret), read for every message.
        - name: notify-url
          mountPath: /notify
          readOnly: true
        {{- end }}
      {{- if or (ne .role "watcher") $notify }}
      volumes:
      {{- end }}
      {{- if ne .role "watcher" }}
      - name: certs
        {{- if .Values.watchNamespaces }}
        secret:
          secretName: {{ include "configstamp.certSecret" . }}
        {{- else }}
        emptyDir:
          medium: Memory
          sizeLimit: 1Mi
        {{- end }}
      {{- with .Values.webhook.clientCA.secretName }}
      - name: webhook-client-ca
        secret:
          secretName: {{ . }}
          items:
          - {key: {{ $.Values.webhook.clientCA.key }}, path: {{ $.Values.webhook.clientCA.key }}}
      {{- end }}
      {{- end }}
      {{- if $notify }}
      - name: notify-url
        secret:
          secretName: {{ .Values.notifications.urlSecret.name }}
          # Optional: a missing Secret or key fails the messages (logged), never the
          # watcher's start.
          optional: true
          items:
          - {key: {{ .Values.notifications.urlSecret.key }}, path: {{ .Values.notifications.urlSecret.key }}}
      {{- end }}
{{- end }}

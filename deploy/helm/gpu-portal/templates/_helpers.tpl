{{/* Names: <release> when it contains the chart's name, else <release>-gpu-portal. */}}
{{- define "gpu-portal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpu-portal.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "web"). */}}
{{- define "gpu-portal.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpu-portal.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "gpu-portal.secretName" -}}
{{- .Values.existingSecret | default (include "gpu-portal.fullname" .) -}}
{{- end -}}

{{- define "gpu-portal.webService" -}}
{{ include "gpu-portal.fullname" . }}-web
{{- end -}}

{{/* Refuse values that cannot work, with a message saying what to set. */}}
{{- define "gpu-portal.validate" -}}
{{- if and .Values.existingSecret (or .Values.postgresql.enabled .Values.redis.enabled) -}}
{{- fail "postgresql.enabled and redis.enabled write their URLs into the chart's Secret: set existingSecret to \"\"" -}}
{{- end -}}
{{- if not .Values.existingSecret -}}
{{- if not (or .Values.externalDatabase.url .Values.postgresql.enabled) -}}
{{- fail "no database: set externalDatabase.url, or postgresql.enabled for a trial, or existingSecret" -}}
{{- end -}}
{{- if not (or .Values.externalRedis.url .Values.redis.enabled) -}}
{{- fail "no Redis: set externalRedis.url, or redis.enabled for a trial, or existingSecret" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.ingress.enabled .Values.httpRoute.enabled -}}
{{- fail "choose one of ingress.enabled and httpRoute.enabled" -}}
{{- end -}}
{{- end -}}

{{/* A value generated once: the one already in the release's Secret, else a new random one. */}}
{{- define "gpu-portal.kept" -}}
{{- $secret := lookup "v1" "Secret" .root.Release.Namespace (include "gpu-portal.fullname" .root) -}}
{{- if and $secret (hasKey ($secret.data | default dict) .key) -}}
{{- index $secret.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum .length -}}
{{- end -}}
{{- end -}}

{{/* The settings every process reads (portal/settings.py), as ConfigMap data. */}}
{{- define "gpu-portal.configData" -}}
{{- $web := include "gpu-portal.webService" . -}}
{{- $internal := printf "%s.%s.svc" $web .Release.Namespace -}}
DEBUG: "false"
ALLOWED_HOSTS: {{ printf "%s,%s" .Values.portalHost $internal | quote }}
CSRF_TRUSTED_ORIGINS: {{ printf "https://%s" .Values.portalHost | quote }}
PORTAL_URL: {{ printf "https://%s" .Values.portalHost | quote }}
CLUSTER_BACKEND: {{ .Values.clusterBackend | quote }}
PORTAL_INTERNAL_URL: {{ printf "http://%s" $internal | quote }}
WORKLOAD_DOMAIN: {{ required "workloadDomain: notebooks and services need a domain of their own" .Values.workloadDomain | quote }}
{{- if .Values.httpRoute.enabled }}
WORKLOAD_ROUTE: httproute
WORKLOAD_GATEWAY_NAME: {{ .Values.httpRoute.gateway.name | quote }}
WORKLOAD_GATEWAY_NAMESPACE: {{ .Values.httpRoute.gateway.namespace | quote }}
WORKLOAD_GATEWAY_SECTION: {{ .Values.httpRoute.gateway.sectionName | quote }}
{{- else }}
WORKLOAD_ROUTE: ingress
WORKLOAD_INGRESS_CLASS: {{ .Values.ingress.className | quote }}
{{- end }}
INGRESS_CONTROLLER_NAMESPACE: {{ .Values.networkPolicy.ingressControllerNamespace | quote }}
PROMETHEUS_URL: {{ .Values.prometheus.url | quote }}
DEFAULT_FROM_EMAIL: {{ .Values.email.from | quote }}
CONN_MAX_AGE: "60"
CELERY_BEAT_SCHEDULE_FILENAME: /tmp/celerybeat-schedule
{{- with .Values.oidc }}
{{- if .clientId }}
OIDC_RP_CLIENT_ID: {{ .clientId | quote }}
OIDC_RP_SIGN_ALGO: {{ .signAlgo | quote }}
OIDC_RP_SCOPES: {{ .scopes | quote }}
OIDC_OP_AUTHORIZATION_ENDPOINT: {{ required "oidc.authorizationEndpoint" .authorizationEndpoint | quote }}
OIDC_OP_TOKEN_ENDPOINT: {{ required "oidc.tokenEndpoint" .tokenEndpoint | quote }}
OIDC_OP_USER_ENDPOINT: {{ required "oidc.userEndpoint" .userEndpoint | quote }}
OIDC_OP_JWKS_ENDPOINT: {{ required "oidc.jwksEndpoint" .jwksEndpoint | quote }}
OIDC_GROUPS_CLAIM: {{ .groupsClaim | quote }}
OIDC_GROUP_MAP: {{ .groupMap | quote }}
{{- end }}
{{- end }}
{{- range $key, $value := .Values.extraConfig }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* The chart's Secret data (existingSecret ""), as stringData. */}}
{{- define "gpu-portal.secretData" -}}
{{- $full := include "gpu-portal.fullname" . -}}
SECRET_KEY: {{ .Values.secretKey | default (include "gpu-portal.kept" (dict "root" . "key" "SECRET_KEY" "length" 50)) | quote }}
{{- if .Values.postgresql.enabled }}
{{- $password := .Values.postgresql.password | default (include "gpu-portal.kept" (dict "root" . "key" "POSTGRES_PASSWORD" "length" 32)) }}
POSTGRES_PASSWORD: {{ $password | quote }}
DATABASE_URL: {{ printf "postgres://%s:%s@%s-postgresql:5432/%s" .Values.postgresql.username $password $full .Values.postgresql.database | quote }}
{{- else }}
DATABASE_URL: {{ .Values.externalDatabase.url | quote }}
{{- end }}
{{- if .Values.redis.enabled }}
REDIS_URL: {{ printf "redis://%s-redis:6379/0" $full | quote }}
{{- else }}
REDIS_URL: {{ .Values.externalRedis.url | quote }}
{{- end }}
MONITORING_TOKEN: {{ .Values.monitoringToken | default (include "gpu-portal.kept" (dict "root" . "key" "MONITORING_TOKEN" "length" 32)) | quote }}
{{- if .Values.email.url }}
EMAIL_URL: {{ .Values.email.url | quote }}
{{- end }}
{{- if .Values.oidc.clientSecret }}
OIDC_RP_CLIENT_SECRET: {{ .Values.oidc.clientSecret | quote }}
{{- end }}
{{- end -}}

{{/* The pod-level settings every portal pod shares. */}}
{{- define "gpu-portal.podCommon" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* envFrom of every portal container: (dict "root" $ "config" name "secret" name). */}}
{{- define "gpu-portal.envFrom" -}}
envFrom:
  - configMapRef: {name: {{ .config }}}
  - secretRef: {name: {{ .secret }}}
{{- end -}}

{{/* The init container that waits until the schema is current. */}}
{{- define "gpu-portal.waitForMigrations" -}}
- name: wait-for-migrations
  image: {{ include "gpu-portal.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["python", "manage.py", "migrate", "--check"]
  {{- include "gpu-portal.envFrom" (dict "config" (include "gpu-portal.fullname" .) "secret" (include "gpu-portal.secretName" .)) | nindent 2 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.waitForMigrations.resources | nindent 4 }}
  volumeMounts:
    - {name: tmp, mountPath: /tmp}
{{- end -}}

{{/* An HTTP probe of the web tier: (dict "root" $ "path" "/healthz"). */}}
{{- define "gpu-portal.probe" -}}
httpGet:
  path: {{ .path }}
  port: http
  httpHeaders:
    - {name: Host, value: {{ .root.Values.portalHost | quote }}}
    - {name: X-Forwarded-Proto, value: https}
{{- end -}}

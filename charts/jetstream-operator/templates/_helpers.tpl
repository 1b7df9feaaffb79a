{{/* Names are DNS labels: at most 63 characters, no trailing dash. */}}

{{- define "jetstream-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "jetstream-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "<fullname>-<suffix>", still at most 63 characters: the full name gives way. */}}
{{- define "jetstream-operator.suffixed" -}}
{{- $suffix := index . 1 }}
{{- $base := include "jetstream-operator.fullname" (index . 0) | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $base $suffix }}
{{- end }}

{{- define "jetstream-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "jetstream-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jetstream-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "jetstream-operator.labels" -}}
helm.sh/chart: {{ include "jetstream-operator.chart" . }}
{{ include "jetstream-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: jetstream-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "jetstream-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "jetstream-operator.fullname" .) .Values.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "jetstream-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Active/standby through kopf peering: only with more than one replica. */}}
{{- define "jetstream-operator.peeringEnabled" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ end }}
{{- end }}

{{- define "jetstream-operator.peeringName" -}}
{{- default (include "jetstream-operator.fullname" .) .Values.peering.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Whether watchNamespaces uses kopf's globs or negations (then kopf lists namespaces). */}}
{{- define "jetstream-operator.namespaceGlobs" -}}
{{- range .Values.watchNamespaces }}
{{- if regexMatch "[*?!\\[]" . }}true{{ end }}
{{- end }}
{{- end }}

{{/* Checks that values.schema.json cannot express; they fail with a message that says why. */}}
{{- define "jetstream-operator.validate" -}}
{{- if eq .Values.rbac.scope "namespaced" }}
{{- if not .Values.watchNamespaces }}
{{- fail "rbac.scope=namespaced needs watchNamespaces: the namespaces to make Roles in" }}
{{- end }}
{{- if include "jetstream-operator.namespaceGlobs" . }}
{{- fail (printf "rbac.scope=namespaced cannot make Roles for globs or negations in watchNamespaces %v: list plain namespace names, or use rbac.scope=cluster" .Values.watchNamespaces) }}
{{- end }}
{{- end }}
{{- if ne (empty .Values.nats.tlsSecret.certKey) (empty .Values.nats.tlsSecret.keyKey) }}
{{- fail "nats.tlsSecret.certKey and nats.tlsSecret.keyKey go together: set both or neither" }}
{{- end }}
{{- end }}

{{/*
The group and plural of every CRD of files/crds/, as a JSON list (read it with fromJsonArray);
the `*.policy.yaml` files beside them hold their admission policies.
*/}}
{{- define "jetstream-operator.crdNames" -}}
{{- $names := list }}
{{- range $path, $_ := .Files.Glob "files/crds/*.yaml" }}
{{- if not (hasSuffix ".policy.yaml" $path) }}
{{- $crd := $.Files.Get $path | fromYaml }}
{{- $names = append $names (dict "group" $crd.spec.group "plural" $crd.spec.names.plural "scope" $crd.spec.scope) }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{/* The API rules of the operator, shared by the ClusterRole and the per-namespace Roles. */}}
{{- define "jetstream-operator.resourceRules" -}}
{{- $plurals := dict }}
{{- range include "jetstream-operator.crdNames" . | fromJsonArray }}
{{- if eq .scope "Namespaced" }}
{{- $_ := set $plurals .group (append (get $plurals .group | default list) .plural) }}
{{- end }}
{{- end }}
{{- $manage := .Values.operator.manageConnections }}
{{- range $group, $resources := $plurals }}
{{- $written := list }}
{{- $read := list }}
{{- range $resources }}
{{- if and (not $manage) (eq . "natsconnections") }}
{{- $read = append $read . }}
{{- else }}
{{- $written = append $written . }}
{{- end }}
{{- end }}
- apiGroups: [{{ $group | quote }}]
  resources: {{ toJson $written }}
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: [{{ $group | quote }}]
  resources:
  {{- range $written }}
  - {{ printf "%s/status" . }}
  {{- end }}
  verbs: ["get", "patch", "update"]
{{- if $read }}
# operator.manageConnections=false: another release manages them; this one only reads them.
- apiGroups: [{{ $group | quote }}]
  resources: {{ toJson $read }}
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end }}
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* The operator's rule on Secrets, where rbac.secrets grants one. */}}
{{- define "jetstream-operator.secretRules" -}}
{{- if .Values.rbac.secrets }}
- apiGroups: [""]
  resources: ["secrets"]
  {{- if .Values.operator.manageConnections }}
  # patch: a working connection holds its Secrets with a finalizer until it is deleted;
  # create and patch: a NatsUser's creds Secret (server-side apply, never read back)
  verbs: ["get", "patch", "create"]
  {{- else }}
  verbs: ["get"]
  {{- end }}
{{- end }}
{{- end }}

{{/*
"true" where Secrets are granted by Roles, namespace by namespace (watchNamespaces lists plain
names, or rbac.scope is namespaced), rather than by the ClusterRole in every namespace.
*/}}
{{- define "jetstream-operator.secretsInRoles" -}}
{{- $plain := true }}
{{- range .Values.watchNamespaces }}
{{- if or (contains "*" .) (hasPrefix "!" .) (contains "?" .) }}
{{- $plain = false }}
{{- end }}
{{- end }}
{{- if and .Values.rbac.secrets .Values.watchNamespaces $plain }}true{{ end }}
{{- end }}

{{/*
The `selector` value (a Kubernetes LabelSelector) in kubectl's syntax, for
JETSTREAM_OPERATOR_SELECTOR: requirements joined by commas, which all must hold.
*/}}
{{- define "jetstream-operator.labelSelector" -}}
{{- $parts := list -}}
{{- range $key, $value := .matchLabels }}
{{- $parts = append $parts (printf "%s=%s" $key $value) }}
{{- end }}
{{- range .matchExpressions }}
{{- if eq .operator "In" }}
{{- $parts = append $parts (printf "%s in (%s)" .key (join "," .values)) }}
{{- else if eq .operator "NotIn" }}
{{- $parts = append $parts (printf "%s notin (%s)" .key (join "," .values)) }}
{{- else if eq .operator "Exists" }}
{{- $parts = append $parts .key }}
{{- else }}
{{- $parts = append $parts (printf "!%s" .key) }}
{{- end }}
{{- end }}
{{- join "," $parts -}}
{{- end }}

{{/*
The operator's rules on our cluster-scoped kinds (ClusterNatsConnection), always in a
ClusterRole: a Role cannot grant them.
*/}}
{{- define "jetstream-operator.clusterResourceRules" -}}
{{- range include "jetstream-operator.crdNames" . | fromJsonArray }}
{{- if eq .scope "Cluster" }}
- apiGroups: [{{ .group | quote }}]
  resources: [{{ .plural | quote }}]
  {{- if $.Values.operator.manageConnections }}
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: [{{ .group | quote }}]
  resources: [{{ printf "%s/status" .plural | quote }}]
  verbs: ["get", "patch", "update"]
  {{- else }}
  verbs: ["get", "list", "watch"]
  {{- end }}
{{- end }}
{{- end }}
{{- end }}

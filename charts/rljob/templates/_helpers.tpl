{{/* Names and labels shared by every template. */}}

{{- define "rljob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-scoped name; "<release>-rljob" unless the release name already contains the chart name. */}}
{{- define "rljob.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "rljob.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "rljob.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of the operator pod (immutable in a Deployment: never add to them). */}}
{{- define "rljob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rljob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "rljob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rljob.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "rljob.peeringName" -}}
{{- default (include "rljob.fullname" .) .Values.operator.peeringName -}}
{{- end -}}

{{- define "rljob.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
Namespaces whose trainer pods this release scrapes, as a JSON list: metrics.podMonitor.namespaces, else the
namespaces the operator watches (operator.watchNamespaces). Empty: every namespace (a cluster-wide install).
Why not always every namespace: with one install per team namespace, each release would scrape every
trainer again, and every trainer series would be stored once per release.
*/}}
{{- define "rljob.scrapeNamespaces" -}}
{{- toJson (default .Values.operator.watchNamespaces .Values.metrics.podMonitor.namespaces) -}}
{{- end -}}

{{/* True (non-empty) when the cluster serves prometheus-operator's CRDs. */}}
{{- define "rljob.hasMonitoring" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/* GKE Managed Prometheus objects: metrics.managedPrometheus.enabled true, or auto and the API is served. */}}
{{- define "rljob.hasGMP" -}}
{{- $want := .Values.metrics.managedPrometheus.enabled -}}
{{- if or (eq (toString $want) "true") (and (eq (toString $want) "auto") (.Capabilities.APIVersions.Has "monitoring.googleapis.com/v1")) -}}true{{- end -}}
{{- end -}}

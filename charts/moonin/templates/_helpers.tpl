{{/*
The release's full name, the prefix of every object: the release name when it already holds
the chart's name (`helm install moonin …` gives `moonin`, `moonin-scaling`, … like config/),
else `<release>-moonin`. At most 52 characters, so every suffix below still fits in 63.
*/}}
{{- define "moonin.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "moonin.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "moonin.labels" -}}
{{ include "moonin.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "moonin.serviceAccountName" -}}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
{{- fail "serviceAccount.name: name the existing ServiceAccount when serviceAccount.create is false" -}}
{{- end -}}
{{- default (include "moonin.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The enabled controllers, in the order `moonin run --controllers` lists them. */}}
{{- define "moonin.controllers" -}}
{{- $on := list -}}
{{- range $name := list "discovery" "scaling" "sandbox" -}}
{{- if (get $.Values.controllers $name).enabled -}}
{{- $on = append $on $name -}}
{{- end -}}
{{- end -}}
{{- if not $on -}}
{{- fail "controllers: enable at least one of discovery, scaling, sandbox (a manager without controllers has nothing to do)" -}}
{{- end -}}
{{- join "," $on -}}
{{- end -}}

{{- define "moonin.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
A ClusterRoleBinding of the chart's ServiceAccount to the ClusterRole of the same name.
Argument: (list $ "<full name of the role>").
*/}}
{{- define "moonin.clusterRoleBinding" -}}
{{- $ := index . 0 -}}
{{- $name := index . 1 -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "moonin.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "moonin.serviceAccountName" $ }}
    namespace: {{ $.Release.Namespace }}
{{- end -}}

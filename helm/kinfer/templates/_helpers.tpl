{{/* Names, labels and the operator's RBAC rules, shared by the templates. */}}

{{/* The chart name, at most 63 characters. */}}
{{- define "kinfer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Name of the operator's objects: <release>-operator unless fullnameOverride. At most 63 characters;
a name with a suffix (-metrics, -edit, -view, -leader-election) cuts this one to 63 minus the
suffix first, so it stays a DNS label (a Service's name must be) and distinct from the others.
*/}}
{{- define "kinfer.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kinfer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kinfer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "kinfer.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | trunc 63 | trimSuffix "-" }}
{{ include "kinfer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kinfer
{{- end -}}

{{- define "kinfer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kinfer.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The operator's rules where InferenceServices live: all namespaces (a ClusterRole) or each of
.Values.watchNamespaces (a Role each). Only what the operator calls; no "*", no secrets, no
pods/exec or pods/proxy. tests/python/test_manifests.py pins this exact list.
*/}}
{{- define "kinfer.operatorRules" -}}
# InferenceServices: the informer lists and watches them; the reconciler gets one by name.
# No create/delete/update: users own the spec.
- apiGroups: ["serving.kinfer.dev"]
  resources: ["inferenceservices"]
  verbs: ["get", "list", "watch"]
# Status: conditions, replicas, selector (for /scale), queue depth, P99 and the scale reason.
- apiGroups: ["serving.kinfer.dev"]
  resources: ["inferenceservices/status"]
  verbs: ["get", "update", "patch"]
# Owner references with blockOwnerDeletion need update on the owner's finalizers subresource where
# the OwnerReferencesPermissionEnforcement admission plugin is on (OpenShift, hardened clusters).
- apiGroups: ["serving.kinfer.dev"]
  resources: ["inferenceservices/finalizers"]
  verbs: ["update"]
# Each InferenceService's Deployment: created, compared and patched (only what changed). Deletion is
# left to garbage collection through the owner reference, so no delete verb.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# Each InferenceService's Service, handled like the Deployment.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# The sidecar's configuration (rendered from spec.sidecar) lives in a ConfigMap per InferenceService.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# The PodDisruptionBudget exists only while the service may run more than one pod, so the operator also
# deletes it (a PDB on one pod would block node drains).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Pods: which are ready (autoscaler input) and their IPs, to scrape each sidecar's /metrics directly.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# Events on the InferenceService (scaled, invalid spec, rollout); patch aggregates repeats.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}

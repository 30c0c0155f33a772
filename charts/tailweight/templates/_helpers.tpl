{{/* Names and labels. */}}
{{- define "tailweight.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object's name: the release name (`tailweight` for `helm install tailweight`),
or <release>-tailweight when the release name does not contain the chart's. */}}
{{- define "tailweight.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains (include "tailweight.name" .) .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "tailweight.name" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tailweight.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tailweight
{{- end -}}

{{- define "tailweight.labels" -}}
{{ include "tailweight.commonLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tailweight.aggregator.name" -}}
{{- printf "%s-aggregator" (include "tailweight.fullname" .) -}}
{{- end -}}

{{- define "tailweight.aggregator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tailweight.name" . }}-aggregator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tailweight.aggregator.labels" -}}
{{ include "tailweight.commonLabels" . }}
{{ include "tailweight.aggregator.selectorLabels" . }}
app.kubernetes.io/component: aggregator
{{- end -}}

{{/* The aggregator Service's host and the Envoy cluster a caller's sidecar reaches it through. */}}
{{- define "tailweight.aggregator.host" -}}
{{- printf "%s.%s.svc.%s" (include "tailweight.aggregator.name" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "tailweight.aggregator.port" -}}8080{{- end -}}

{{/* The filter's `aggregator` object (both roles): the aggregator's cluster and authority, then
filter.aggregator's knobs (camelCase -> snake_case). JSON. */}}
{{- define "tailweight.aggregator.pluginConfig" -}}
{{- $aggregator := dict "cluster" (printf "outbound|%s||%s" (include "tailweight.aggregator.port" .) (include "tailweight.aggregator.host" .)) "authority" (include "tailweight.aggregator.host" .) -}}
{{- range $key, $value := dig "aggregator" (dict) .Values.filter }}{{- $_ := set $aggregator (snakecase $key) $value }}{{- end -}}
{{- toJson $aggregator -}}
{{- end -}}

{{/*
The plan, from .Values.services alone (JSON; templates read it with fromJson):
  clients: {<client namespace>: [{host, port, subset, cluster, stamped}, ...]}  what each namespace steers
  stamping: [<namespace>, ...]  namespaces whose sidecars stamp their responses (server role): those
    of services with `loadStamps: true`, or without the key when attestations run (the default)
  attesting: {<service namespace>: [<cluster>, ...]}  what each namespace's sidecars attest for
    (server role): every cluster of its services; empty without the aggregator or attestations
A service entry steers for each namespace in its `clients` (default: its own namespace), one Envoy
cluster per subset (none: the service's own cluster outbound|<port>||<host>).
*/}}
{{- define "tailweight.plan" -}}
{{- $clients := dict -}}
{{- $stamping := list -}}
{{- $attesting := dict -}}
{{- $attest := and .Values.aggregator.enabled .Values.attestations.enabled -}}
{{- $seen := dict -}}
{{- range $i, $svc := .Values.services -}}
{{- $key := printf "%s/%s:%v" $svc.namespace $svc.name $svc.port -}}
{{- if hasKey $seen $key -}}
{{- fail (printf "services[%d]: %s is listed twice (one entry per Service port; put its clients and subsets in one entry)" $i $key) -}}
{{- end -}}
{{- $_ := set $seen $key true -}}
{{- $host := printf "%s.%s.svc.%s" $svc.name $svc.namespace $.Values.clusterDomain -}}
{{- $subsets := $svc.subsets | default (list "") -}}
{{- /* Stamped: as the service says, else wherever its namespace runs the server role anyway (attestations). */ -}}
{{- $stamped := $attest -}}
{{- if hasKey $svc "loadStamps" -}}{{- $stamped = $svc.loadStamps -}}{{- end -}}
{{- if $stamped -}}{{- $stamping = append $stamping $svc.namespace | uniq -}}{{- end -}}
{{- if $attest -}}
{{- $served := get $attesting $svc.namespace | default (list) -}}
{{- range $subset := $subsets -}}{{- $served = append $served (printf "outbound|%v|%s|%s" $svc.port $subset $host) -}}{{- end -}}
{{- if gt (len $served) 64 -}}
{{- fail (printf "services: namespace %s has %d clusters (ports x subsets) to attest for; its server-role filter takes at most 64 (attest_clusters): set attestations.enabled=false or list fewer" $svc.namespace (len $served)) -}}
{{- end -}}
{{- $_ := set $attesting $svc.namespace $served -}}
{{- end -}}
{{- $namespaces := list $svc.namespace -}}
{{- if hasKey $svc "clients" -}}{{- $namespaces = $svc.clients -}}{{- end -}}
{{- range $ns := $namespaces -}}
{{- $entries := get $clients $ns | default (list) -}}
{{- range $subset := $subsets -}}
{{- $entries = append $entries (dict "host" $host "port" (int $svc.port) "subset" $subset "cluster" (printf "outbound|%v|%s|%s" $svc.port $subset $host) "stamped" $stamped) -}}
{{- end -}}
{{- $_ := set $clients $ns $entries -}}
{{- end -}}
{{- end -}}
{{- dict "clients" $clients "stamping" (sortAlpha $stamping) "attesting" $attesting | toJson -}}
{{- end -}}

{{/* The module's URL as the WasmPlugin's `url` takes it. */}}
{{- define "tailweight.module.url" -}}
{{- $m := .Values.module -}}
{{- if eq $m.source "oci" -}}
{{- if $m.oci.digest -}}
{{- printf "oci://%s@%s" $m.oci.repository $m.oci.digest -}}
{{- else -}}
{{- printf "oci://%s:%s" $m.oci.repository (default .Chart.AppVersion $m.oci.tag) -}}
{{- end -}}
{{- else if eq $m.source "http" -}}
{{- $m.http.url -}}
{{- else -}}
{{- printf "file://%s" $m.file.path -}}
{{- end -}}
{{- end -}}

{{/* The WasmPlugin fields both roles share: the module, how it is fetched, FAIL_OPEN. */}}
{{- define "tailweight.module.fields" -}}
url: {{ include "tailweight.module.url" . | quote }}
{{- if eq .Values.module.source "http" }}
sha256: {{ .Values.module.http.sha256 | quote }}
{{- end }}
imagePullPolicy: {{ .Values.module.pullPolicy }}
{{- with .Values.module.pullSecret }}
imagePullSecret: {{ . }}
{{- end }}
type: HTTP
# After authentication and authorization (a refused request is neither a pick nor load), before
# the router; higher priority runs earlier within the phase.
phase: STATS
priority: 10
# A module that cannot be fetched or started is skipped: traffic never fails because of it. (An
# invalid pluginConfig is handled by the filter: one log line, traffic passes untouched.)
failStrategy: FAIL_OPEN
{{- end -}}

{{/* The header override_host reads and the filter writes (the filter's default; not configurable
here, since the EnvoyFilters name it too). */}}
{{- define "tailweight.overrideHeader" -}}x-gateway-destination-endpoint{{- end -}}

{{/* "<n>Mi"/"<n>Gi"/"<n>M"/"<n>G"/bytes as MiB (0 when the form is not one of these). */}}
{{- define "tailweight.mebibytes" -}}
{{- $q := toString . -}}
{{- if regexMatch "^[0-9]+Mi$" $q -}}{{- trimSuffix "Mi" $q -}}
{{- else if regexMatch "^[0-9]+Gi$" $q -}}{{- mul (trimSuffix "Gi" $q | int) 1024 -}}
{{- else if regexMatch "^[0-9]+M$" $q -}}{{- div (mul (trimSuffix "M" $q | int64) 1000000) 1048576 -}}
{{- else if regexMatch "^[0-9]+G$" $q -}}{{- div (mul (trimSuffix "G" $q | int64) 1000000000) 1048576 -}}
{{- else if regexMatch "^[0-9]+$" $q -}}{{- div ($q | int64) 1048576 -}}
{{- else -}}0{{- end -}}
{{- end -}}

{{/* module.kind native: the native shell (libtailweight_native.so at module.native.path) as an
HTTP filter before the router of the sidecars' `context` listeners (SIDECAR_OUTBOUND for the client
role, SIDECAR_INBOUND for the server role), configured with `config` as the WasmPlugin's
pluginConfig would be. Its metrics take the namespace Envoy gives Wasm metrics
(native/src/config_metrics.rs), so /stats and Istio's default stats inclusion see them as the Wasm
shell's. Called with (dict "context" ... "config" ... "root" $). */}}
{{- define "tailweight.native.patch" -}}
- applyTo: HTTP_FILTER
  match:
    context: {{ .context }}
    listener:
      filterChain:
        filter:
          name: envoy.filters.network.http_connection_manager
          subFilter:
            name: envoy.filters.http.router
  patch:
    operation: INSERT_BEFORE
    value:
      name: tailweight.native
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
        dynamic_module_config:
          module:
            local:
              filename: {{ .root.Values.module.native.path | quote }}
          do_not_close: true
          metrics_namespace: wasmcustom
        filter_name: tailweight
        filter_config:
          "@type": type.googleapis.com/google.protobuf.StringValue
          value: {{ toJson .config | quote }}
{{- end -}}

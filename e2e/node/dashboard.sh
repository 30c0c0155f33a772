# The dashboard's queries on the real node (issue 40, item 2), sourced by leave.sh once bootstrap ran
# (emu-boot's sidecar has the chart's bootstrap override, whose stats tags label the per-endpoint
# counters); Fortio keeps sending:
#   dashboard  Debian's Prometheus (on 127.0.0.1) scrapes the pods as the chart's monitors say: the
#              client sidecars' Envoy on 15090 /stats/prometheus (PodMonitor http-envoy-prom, only
#              tailweight_* kept) and each aggregator replica's merged metrics on 15020 (its
#              ServiceMonitor), each target labelled with its namespace and pod as the operator
#              would; then every query of every panel of charts/tailweight/dashboards/tailweight.json,
#              each variable at "All" (e2e/tests/test_dashboard.py's panel_queries), through the
#              HTTP API. PASS when every panel that draws the sidecars' or the aggregator's
#              stats has series; the panel that lists sidecars that never received a view is
#              empty when every sidecar has one
# shellcheck shell=bash

PROMETHEUS_BIN=$(command -v prometheus || true)
DASHBOARD_SCRAPE_S=1
# Panels that are empty on a healthy node: no sidecar lacks a view, and no report was rejected.
DASHBOARD_EMPTY_WHEN_HEALTHY='Sidecars that never received a view|Rejected reports by reason'

# dashboard_targets: the scrape configs' static targets, one "<job> <ip:port> <namespace> <pod>" a line.
dashboard_targets() {
  local p i
  for p in emu-client emu-boot; do
    echo "sidecars $(mesh_pod_field "$p" 'p["status"]["podIP"]'):15090 $MESH_NS $p"
  done
  ready_pods "$TW_NS" "$AGG_SELECTOR" | while read -r p ip; do echo "aggregator $ip:15020 $TW_NS $p"; done
}
# dashboard_config TARGETS: Prometheus' configuration for the lines of dashboard_targets in file TARGETS.
dashboard_config() {
  python3 - "$DASHBOARD_SCRAPE_S" "$1" <<'PY'
import json, sys
jobs = {}
for line in open(sys.argv[2]):
    job, target, namespace, pod = line.split()
    jobs.setdefault(job, []).append({"targets": [target], "labels": {"namespace": namespace, "pod": pod}})
keep = [{"source_labels": ["__name__"], "regex": "tailweight_.*", "action": "keep"}]
print(json.dumps({"global": {"scrape_interval": f"{sys.argv[1]}s", "scrape_timeout": f"{sys.argv[1]}s"},
                  "scrape_configs": [{"job_name": job, "metrics_path": "/stats/prometheus", "static_configs": targets,
                                      "metric_relabel_configs": keep} for job, targets in jobs.items()]}))
PY
}
# dashboard_panels URL: each panel's title and how many series its queries returned, "<n>\t<title>".
dashboard_panels() {
  (cd "$HERE/.." && python3 - "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
sys.path[:0] = ["tests", "."]
from test_dashboard import ALL, panel_queries
for title, exprs in panel_queries(ALL).items():
    series = 0
    for expr in exprs:
        url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as answer:
            series += len(json.load(answer)["data"]["result"])
    print(f"{series}\t{title}")
PY
  )
}

if [ -z "$PROMETHEUS_BIN" ]; then
  result dashboard "SKIP no prometheus (Debian's prometheus: scripts/install-deps.sh)"
elif dashboard_targets > "$WORK/dashboard-targets" 2>> "$WORK/dashboard.log" &&
     dashboard_config "$WORK/dashboard-targets" > "$WORK/prometheus.yml"; then
  PROM_ADDR="127.0.0.1:$(free_port)"
  start prometheus "$PROMETHEUS_BIN" "--config.file=$WORK/prometheus.yml" "--web.listen-address=$PROM_ADDR" \
    "--storage.tsdb.path=$WORK/prometheus-data"
  prometheus_pid=${PIDS[-1]}
  # Rates need a few scrapes (the test's $__rate_interval is 8 s at a 1 s scrape).
  wait_until 30 curl -sf --max-time 2 "http://$PROM_ADDR/-/ready" && sleep 12
  if dashboard_panels "http://$PROM_ADDR" > "$WORK/dashboard.panels" 2>> "$WORK/dashboard.log"; then
    panels=$(wc -l < "$WORK/dashboard.panels")
    with_data=$(awk -F'\t' '$1 > 0' "$WORK/dashboard.panels" | wc -l)
    empty=$(awk -F'\t' '$1 == 0 {print $2}' "$WORK/dashboard.panels" | paste -sd, | sed 's/,/, /g')
    unexpected=$(awk -F'\t' '$1 == 0 {print $2}' "$WORK/dashboard.panels" | grep -vxE "$DASHBOARD_EMPTY_WHEN_HEALTHY" | paste -sd, | sed 's/,/, /g')
    figures="$with_data of $panels panels with series (targets: $(awk '{print $4}' "$WORK/dashboard-targets" | paste -sd' ')); empty: ${empty:-none}"
    if [ "$panels" -gt 0 ] && [ -z "$unexpected" ]; then result dashboard "PASS $figures"
    else result dashboard "FAIL $figures"; fi
    sed 's/^/  /' "$WORK/dashboard.panels" >&2
  else result dashboard "FAIL queries: $(tail -1 "$WORK/dashboard.log" | cut -c1-300)"; fi
  stop_group "$prometheus_pid"
else result dashboard "FAIL targets: $(first_error "$WORK/dashboard.log")"; fi

# The CLI against the real node (issue 40, items 2 and 4), sourced by chart.sh once steered ran (it
# uses probe.sh's, mesh.sh's, backends.sh's and chart.sh's names); Fortio keeps sending:
#   cli       `tailweight endpoints --pod tw-mesh/emu-client` with the probe's kubeconfig: the CLI
#             reaches the client's sidecar as it does for users (its own `kubectl port-forward`,
#             through the apiserver to the kubelet), names each endpoint by its pod (the apiserver),
#             and asks both aggregator replicas for the weights, each through a `kubectl
#             port-forward` to its read-only port as docs/istio.md says; PASS when every emulator
#             pod has a row with a share, a weight and a latency, and the slow pod has the smallest
#             share (the weights and the picker's latency estimates move on a loaded machine: no
#             order asked of them)
#   replicas  which replica holds the emu cluster (200) and which answers 404; the CLI with the
#             non-owner alone fails, saying so; then CLI_RUNS invocations with both replicas, in
#             either order, every one answered with every row's weight
# shellcheck shell=bash

CLI_RUNS=20
EMU_CLUSTER="outbound|$EMU_PORT||emu.$MESH_NS.svc.cluster.local"

# tw_cli ARGS...: the CLI with the probe's kubeconfig (kubectl's flags are global).
tw_cli() { "$TW_CLI" --kubeconfig "$WORK/kubeconfig" "$@"; }
# endpoints_rows: the rows of `tailweight endpoints`' table on stdin as "<pod> <share%> <weight> <latency ms>".
endpoints_rows() { awk 'NR > 2 {sub(/%$/, "", $3); sub(/ms$/, "", $6); print $1, $3, $5, $6}'; }
# cli_checks: from endpoints_rows on stdin, "ok" when each of the emulator pods (EMU_NAMES) has a row
# with a share, a weight and a latency, and the slow one (the last) has the smallest share; else what is
# wrong.
cli_checks() {
  python3 -c '
import sys
rows = {}
for line in sys.stdin:
    pod, share, weight, latency = line.split()
    rows[pod] = (share, weight, latency)
want = sys.argv[2:]
missing = [p for p in want if p not in rows or "-" in rows[p]]
if missing:
    sys.exit(f"no row with a share, a weight and a latency for {missing}: {rows}")
share = {p: float(rows[p][0]) for p in want}
slow = want[-1]
if min(share, key=share.get) != slow:
    sys.exit(f"the slow pod {slow} has not the smallest share: {rows}")
print("ok")' "$EMU_PODS" "${EMU_NAMES[@]}"
}

# -- cli ----------------------------------------------------------------------------------------------------
AGG_URLS=() AGG_PF_PIDS=()
for ((i = 0; i < ${#AGG_PODS[@]}; i++)); do   # the Deployment's pods (chart.sh's tw_aggregator_ready)
  read_only_port=$(kc -n "$TW_NS" get pod "${AGG_PODS[i]}" \
    -o jsonpath='{.spec.containers[*].ports[?(@.name=="http-read-only")].containerPort}')
  port_forward "pf-aggregator-$i" "$TW_NS" "${AGG_PODS[i]}" "$read_only_port" && AGG_URLS+=("http://$PF_ADDR")
  AGG_PF_PIDS+=("$PF_PID")
done
both=$(IFS=,; echo "${AGG_URLS[*]}")
if [ "${#AGG_URLS[@]}" = "$AGG_REPLICAS" ] &&
   tw_cli endpoints --pod "$MESH_NS/emu-client" --cluster "$EMU_CLUSTER" --aggregator "$both" --window-s 5 \
     > "$WORK/cli.out" 2> "$WORK/cli.log" &&
   checked=$(endpoints_rows < "$WORK/cli.out" | cli_checks 2>> "$WORK/cli.log") && [ "$checked" = ok ]; then
  result cli "PASS tailweight endpoints --pod $MESH_NS/emu-client, $AGG_REPLICAS replicas: $(endpoints_rows < "$WORK/cli.out" | awk '{printf "%s%s %s%% weight %s latency %sms", (NR > 1 ? ", " : ""), $1, $2, $3, $4}')"
else result cli "FAIL aggregator port-forwards ${#AGG_URLS[@]} of $AGG_REPLICAS, $(tail -1 "$WORK/cli.log" | cut -c1-300) $(first_error "$WORK/pf-aggregator-0.log")"; fi
sed 's/^/  /' "$WORK/cli.out" >&2

# -- replicas -----------------------------------------------------------------------------------------------
# weights_status URL: the HTTP status of URL's /v1/weights for the emu cluster.
weights_status() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 -G --data-urlencode "cluster=$EMU_CLUSTER" "$1/v1/weights"
}
holders="" others="" statuses=""
for ((i = 0; i < ${#AGG_URLS[@]}; i++)); do
  status=$(weights_status "${AGG_URLS[i]}")
  statuses+="${AGG_PODS[i]} $status, "
  if [ "$status" = 200 ]; then holders+="${AGG_URLS[i]} "; elif [ "$status" = 404 ]; then others+="${AGG_URLS[i]} "; fi
done
non_owner_refused=no
if [ -n "$others" ] &&
   ! tw_cli endpoints --pod "$MESH_NS/emu-client" --cluster "$EMU_CLUSTER" --aggregator "${others%% *}" --window-s 0 \
       > /dev/null 2> "$WORK/replicas-non-owner.log" &&
   grep -q "none of the 1 replicas asked holds" "$WORK/replicas-non-owner.log"; then
  non_owner_refused=yes
fi
reversed=$(printf '%s\n' "${AGG_URLS[@]}" | tac | paste -sd,)
cli_errors=0 cli_weighted=0
for ((run = 0; run < CLI_RUNS; run++)); do
  order=$both; [ $((run % 2)) = 1 ] && order=$reversed
  if tw_cli endpoints --pod "$MESH_NS/emu-client" --cluster "$EMU_CLUSTER" --aggregator "$order" --window-s 0 \
       > "$WORK/replicas-$run.out" 2>> "$WORK/replicas.log"; then
    # every emulator pod's row carries a weight (the owner's view, whichever order the replicas came in)
    [ "$(endpoints_rows < "$WORK/replicas-$run.out" | awk '$1 ~ /^emu-(fast|slow)-/ && $3 != "-"' | wc -l)" -ge "$EMU_PODS" ] &&
      cli_weighted=$((cli_weighted + 1))
  else cli_errors=$((cli_errors + 1)); fi
done
if [ -n "$holders" ] && [ -n "$others" ] && [ "$non_owner_refused" = yes ] && [ "$cli_errors" = 0 ] &&
   [ "$cli_weighted" = "$CLI_RUNS" ]; then
  result replicas "PASS /v1/weights of the emu cluster: ${statuses%, }; the CLI with the 404 replica alone fails (none holds it); with both, in either order: $cli_errors errors in $CLI_RUNS invocations, weights in $cli_weighted"
else result replicas "FAIL statuses: ${statuses%, }; non-owner alone refused: $non_owner_refused; $cli_errors errors and $cli_weighted with weights in $CLI_RUNS invocations; $(tail -1 "$WORK/replicas.log" 2>/dev/null | cut -c1-300)"; fi
for pid in "${AGG_PF_PIDS[@]}"; do stop_group "$pid"; done

# Soak (docs/scenario.md, "Soak"): tailweight (filter + aggregator) in a mesh that moves, at a constant
# modest rate, with RSS, filter stats, tracked endpoints and the aggregator's book sampled and judged.
#   make soak         ~30 min (niced): bench/results/soak/{results.json,results.md,rss.png,tracking.png};
#                     logs, configs, Fortio JSON and the whole run's samples under bench/runs/soak/
#   make soak-short   the same events in ~2 min (the e2e test e2e/tests/test_soak.py runs this plan):
#                     results and logs under bench/runs/soak-short/ (not kept)
# Exit status 1 when a judged target is not met (the results are written first).
.PHONY: soak soak-short

soak: deps build
	PYTHONPATH=e2e nice $(PY) -m harness.soak --plan full

soak-short: deps build
	PYTHONPATH=e2e nice $(PY) -m harness.soak --plan short --out bench/runs/soak-short/results --logs bench/runs/soak-short
